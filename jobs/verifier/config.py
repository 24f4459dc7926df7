"""A job's `verifier_config`, read with synth-ai's names and defaults.

synth-ai (0.4.4 - 0.7.3) sends the `verifier` section of a prompt-learning config as the eval
job's `verifier_config`: `enabled`, `reward_source` (`task_app` | `verifier` | `fused`),
`backend_provider`, `backend_model`, `concurrency` (8), `timeout` (60 s), `weight_env` (1.0),
`weight_event` (0.0), `weight_outcome` (0.0), and fields for synth's own backend that evalhub
accepts and ignores (`backend_base`, `backend_api_key_env`, `verifier_graph_id`, ...).
evalhub's additions: `rubric` (what the judge grades against), `judge_prompt` (replaces the
judge's system prompt) and `max_transcript_chars` (the trimming budget of the conversation).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings

REWARD_SOURCES = ("task_app", "verifier", "fused")
DEFAULT_RUBRIC = (
    "Score how well the assistant accomplished the task. 1.0: the task is fully and correctly "
    "done; 0.5: partly done or done with notable mistakes; 0.0: not done, wrong, or unsafe. "
    "Judge the actions and final answer in the transcript, not the assistant's claims about them."
)
DEFAULT_MODEL = "gpt-4o-mini"
MAX_CONCURRENCY = 256
MAX_TIMEOUT_S = 600.0
MAX_TEXT = 20_000
DEFAULT_TRANSCRIPT_CHARS = 24_000
MAX_TRANSCRIPT_CHARS = 400_000
# The largest weight of the fused reward: weights are relative, and bounded ones keep the
# formula's sums finite (1e308 each overflowed to a NaN reward).
MAX_WEIGHT = 1_000_000
WEIGHTS = ("weight_env", "weight_event", "weight_outcome")


@dataclass(frozen=True)
class VerifierConfig:
    enabled: bool = False
    reward_source: str = "task_app"
    backend_provider: str = "openai"
    backend_model: str = DEFAULT_MODEL
    concurrency: int = 8
    timeout: float = 60.0
    weight_env: float = 1.0
    weight_event: float = 0.0
    weight_outcome: float = 0.0
    rubric: str = DEFAULT_RUBRIC
    judge_prompt: str | None = None
    max_transcript_chars: int = DEFAULT_TRANSCRIPT_CHARS


# The keys read from a `verifier_config` (and synth's own that evalhub accepts and ignores):
# a key close to one of these is named in the job's warnings (a misspelt one loses its setting).
KNOWN_KEYS = (
    *(f.name for f in fields(VerifierConfig)),
    "backend_base", "backend_api_key_env", "verifier_graph_id",
)  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def config_errors(value: dict[str, Any]) -> list[str]:
    """What is wrong with a `verifier_config` (beyond what jobs.api.inputs checks already)."""
    errors = [
        f"{name} must be a number from 0 to {MAX_WEIGHT}"
        for name in WEIGHTS
        if value.get(name) is not None
        and (not _number(value[name]) or not 0 <= value[name] <= MAX_WEIGHT)
    ]
    concurrency = value.get("concurrency")
    if concurrency is not None and (
        not isinstance(concurrency, int) or isinstance(concurrency, bool)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):  # fmt: skip
        errors.append(f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}")
    timeout = value.get("timeout")
    if timeout is not None and (not _number(timeout) or not 1 <= timeout <= MAX_TIMEOUT_S):
        errors.append(f"timeout must be a number of seconds from 1 to {MAX_TIMEOUT_S:g}")
    for name in ("backend_provider", "backend_model", "rubric", "judge_prompt"):
        text = value.get(name)
        if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT):
            errors.append(f"{name} must be a string of at most {MAX_TEXT} characters")
    provider = value.get("backend_provider")
    if isinstance(provider, str) and provider and provider not in settings.EVALHUB_UPSTREAMS:
        # Every judgement of the job would fail: the interceptor serves no such provider.
        known = ", ".join(sorted(settings.EVALHUB_UPSTREAMS))
        errors.append(
            f"backend_provider {provider[:100]!r} is not a provider of this server ({known})"
        )
    chars = value.get("max_transcript_chars")
    if chars is not None and (
        not isinstance(chars, int) or isinstance(chars, bool)
        or not 1000 <= chars <= MAX_TRANSCRIPT_CHARS
    ):  # fmt: skip
        errors.append(
            f"max_transcript_chars must be an integer from 1000 to {MAX_TRANSCRIPT_CHARS}"
        )
    if errors:
        return errors
    if value.get("enabled") and str(value.get("reward_source") or "task_app").strip().lower() == (
        "fused"
    ):
        defaults = {"weight_env": 1.0, "weight_event": 0.0, "weight_outcome": 0.0}
        weights = [d if value.get(n) is None else value[n] for n, d in defaults.items()]
        if sum(weights) <= 0:
            errors.append("reward_source 'fused' needs weights whose sum is above 0")
    return errors


def verifier_config_of(raw: Any, *, policy: dict[str, Any] | None = None) -> VerifierConfig:
    """The job's config with defaults filled in; a judge's provider defaults to the policy's."""
    if not isinstance(raw, dict):
        return VerifierConfig()
    default_provider = (policy or {}).get("provider") if isinstance(policy, dict) else None
    given = {k: v for k, v in raw.items() if v is not None and v != ""}
    source = str(given.get("reward_source") or "task_app").strip().lower()
    return VerifierConfig(
        enabled=bool(given.get("enabled", False)),
        reward_source=source if source in REWARD_SOURCES else "task_app",
        backend_provider=str(given.get("backend_provider") or default_provider or "openai"),
        backend_model=str(given.get("backend_model") or DEFAULT_MODEL),
        concurrency=int(given.get("concurrency", 8)),
        timeout=float(given.get("timeout", 60.0)),
        weight_env=float(given.get("weight_env", 1.0)),
        weight_event=float(given.get("weight_event", 0.0)),
        weight_outcome=float(given.get("weight_outcome", 0.0)),
        rubric=str(given.get("rubric") or DEFAULT_RUBRIC),
        judge_prompt=given.get("judge_prompt"),
        max_transcript_chars=int(given.get("max_transcript_chars", DEFAULT_TRANSCRIPT_CHARS)),
    )
