"""An environment's rollout as a seed's result, and the errors every kind words the same way."""

from __future__ import annotations

from typing import Any

from jobs.fields import json_value_problem, url_shown
from jobs.models import CONNECTION_ERROR_PREFIX
from jobs.scores import Scores
from jobs.worker.environments.loop import LoopResult
from jobs.worker.episode import MAX_ANSWER_DEPTH, RolloutOutcome


def environment_outcome(
    *,
    score: float,
    kind: str,
    details: dict[str, Any],
    loop: LoopResult | None = None,
    trace: dict[str, Any] | None = None,
) -> RolloutOutcome:
    """The seed's scores, metrics (`outcome_reward` and `details`) and task trace."""
    if loop is not None:
        details = {
            **details,
            "stop_reason": loop.stop_reason,
            "model_turns": loop.steps,
            "tool_calls": len(loop.executions),
            "tool_errors": loop.tool_errors,
        }
        trace = loop.trace(kind)
    metrics = {"outcome_reward": score, "details": details}
    if problem := json_value_problem(metrics, max_depth=MAX_ANSWER_DEPTH):
        metrics = {"outcome_reward": score, "details": {"not_stored": f"details {problem}"}}
    if problem := json_value_problem(trace, max_depth=MAX_ANSWER_DEPTH):
        trace = {"kind": kind, "trace_not_stored": f"the environment's trace {problem}"}
    return RolloutOutcome(scores=Scores(score=score), metrics=metrics, trace=trace)


def unreachable(url: str, exc: BaseException) -> str:
    text = str(exc).strip()
    where = url_shown(url)
    return (
        f"{CONNECTION_ERROR_PREFIX} at {where}: {type(exc).__name__}{': ' + text if text else ''}"
    )


def wrong_kind(url: str, expected: str, why: str) -> str:
    return f"{url_shown(url)} is not {expected} (check task_app_kind): {why}"
