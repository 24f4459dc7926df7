"""What a judge reads of a seed: the policy's conversation in the judged rollout (its recorded
calls of any wire format read as one chat conversation by `traces.calls.conversation`), and the task
app's outcome, both through the job's redactor."""

from __future__ import annotations

from typing import Any

from jobs.models import SeedRun
from jobs.verifier.judgements import judged_attempt
from traces.calls.conversation import transcript
from traces.models import CallKind, LLMCall
from traces.redaction import Redactor


def judge_inputs(
    *, seed_run: SeedRun, redactor: Redactor
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the policy's conversation, the task app's outcome) of the seed's judged rollout."""
    attempt = judged_attempt(seed_run)
    calls = (
        LLMCall.objects.filter(attempt=attempt, kind=CallKind.POLICY).order_by("seq")
        if attempt is not None
        else LLMCall.objects.none()
    )
    conversation = transcript((c.route, c.request, c.response) for c in calls)
    metrics = seed_run.metrics if isinstance(seed_run.metrics, dict) else {}
    outcome = {
        "task_app_score": seed_run.task_app_score,
        "details": metrics.get("details"),
        "metrics": {k: v for k, v in metrics.items() if k != "details"},
        "trace": seed_run.task_trace,
    }
    return redactor.value(conversation), redactor.value(outcome)
