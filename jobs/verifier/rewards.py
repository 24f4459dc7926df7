"""A seed's reward under each `reward_source` (the README's "Verifier" section states it).

    task_app  reward = task_app_score
    verifier  reward = verifier_score
    fused     reward = (weight_env * task_app_score + (weight_event + weight_outcome) *
                        verifier_score) / (weight_env + weight_event + weight_outcome)

evalhub's judge gives one score for the whole rollout, so it stands for both synth-ai's event
and outcome verifier rewards: their weights add up. A reward that needs a score that is missing
(the judge failed, or the task app reported none) is None, never a made-up 0.
"""

from __future__ import annotations

from jobs.verifier.config import VerifierConfig


def reward(
    config: VerifierConfig, *, task_app_score: float | None, verifier_score: float | None
) -> float | None:
    if config.reward_source == "verifier":
        return verifier_score
    if config.reward_source == "fused":
        w_env = config.weight_env
        w_verifier = config.weight_event + config.weight_outcome
        if w_env + w_verifier <= 0:
            return None
        if (w_env and task_app_score is None) or (w_verifier and verifier_score is None):
            return None
        total = w_env * (task_app_score or 0.0) + w_verifier * (verifier_score or 0.0)
        return total / (w_env + w_verifier)
    return task_app_score
