"""A seed's reward under each `reward_source` (docs/verifier.md states it).

    task_app  reward = task_app_score
    verifier  reward = verifier_score
    fused     reward = (weight_env * task_app_score + (weight_event + weight_outcome) *
                        verifier_score) / (weight_env + weight_event + weight_outcome)

evalhub's judge gives one score for the whole rollout, so it stands for both synth-ai's event
and outcome verifier rewards: their weights add up. A reward that needs a score that is missing
(the judge failed, or the task app reported none) is None, never a made-up 0.

A reward is always a finite number or None: the fused formula is computed with the weights
scaled to at most 1 and as a weighted mean (never beyond its scores, whatever the weights), and
anything that still is not finite (weights that are not, from a job stored before they were
checked) is None rather than a NaN that no figure and no JSON answer can hold.
"""

from __future__ import annotations

import dataclasses
import math

from jobs.leases import SeedResult
from jobs.models import JudgeStatus
from jobs.scores import Scores
from jobs.verifier.config import VerifierConfig


def reward(
    config: VerifierConfig, *, task_app_score: float | None, verifier_score: float | None
) -> float | None:
    if config.reward_source == "verifier":
        return _finite(verifier_score)
    if config.reward_source == "fused":
        return _fused(config, task_app_score=task_app_score, verifier_score=verifier_score)
    return _finite(task_app_score)


def _fused(
    config: VerifierConfig, *, task_app_score: float | None, verifier_score: float | None
) -> float | None:
    weights = (config.weight_env, config.weight_event, config.weight_outcome)
    if not all(math.isfinite(w) and w >= 0 for w in weights) or max(weights) <= 0:
        return None
    scale = max(weights)  # scaled to at most 1: their sums cannot overflow
    w_env = config.weight_env / scale
    w_verifier = config.weight_event / scale + config.weight_outcome / scale
    if (w_env and task_app_score is None) or (w_verifier and verifier_score is None):
        return None
    total = w_env + w_verifier
    mean = (w_env / total) * (task_app_score or 0.0) + (w_verifier / total) * (
        verifier_score or 0.0
    )
    return _finite(mean)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def seed_result(config: VerifierConfig, outcome, latency_ms: float) -> SeedResult:
    """A succeeded rollout's result: with an enabled verifier its judgement is pending (a
    runner claims it, jobs.worker.judging), and its reward waits for the verdict unless the
    reward source is the task app."""
    scores: Scores = outcome.scores
    judge = ""
    if config.enabled:
        judge = JudgeStatus.PENDING
        score = reward(config, task_app_score=scores.score, verifier_score=None)
        scores = dataclasses.replace(scores, score=score, verifier_score=None)
    return SeedResult(
        scores=scores, metrics=outcome.metrics, task_trace=outcome.trace, latency_ms=latency_ms,
        task_app_score=outcome.scores.score, judge_status=judge,
    )  # fmt: skip
