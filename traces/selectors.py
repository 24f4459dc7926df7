"""Reads the interceptor needs: who a token belongs to. (What a job has spent so far is
`traces.totals.job_spent`.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, Sum

from jobs.models import AttemptStatus, JudgeStatus, RolloutAttempt, SeedRun
from traces.models import BUDGET_EXCEEDED, RETRIED_MARK, ROLLOUT_LIMIT_EXCEEDED, LLMCall


@dataclass(frozen=True)
class AttemptAccess:
    """What the interceptor knows about the rollout attempt behind a token."""

    attempt_id: int
    job_id: str
    provider: str
    running: bool
    finished_at: datetime | None
    max_cost_usd: float | None
    max_tokens: int | None
    # The job's per-rollout limits ({max_llm_calls, max_tokens, max_cost_usd}), or None.
    rollout_limits: dict | None = None
    # "judge" for a verifier's token (jobs/verifier/): its calls are recorded apart.
    kind: str = "policy"

    @property
    def has_budget(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None


def attempt_access_get(*, token_hash: str) -> AttemptAccess | None:
    row = (
        RolloutAttempt.objects.filter(token_hash=token_hash)
        .values(
            "id",
            "status",
            "finished_at",
            "seed_run__job_id",
            "seed_run__job__policy",
            "seed_run__job__max_cost_usd",
            "seed_run__job__max_tokens",
            "seed_run__job__rollout_limits",
        )
        .first()
    )
    if row is None:
        return judge_access_get(token_hash=token_hash)
    policy = row["seed_run__job__policy"] or {}
    provider = policy.get("provider") if isinstance(policy, dict) else None
    return AttemptAccess(
        attempt_id=row["id"],
        job_id=row["seed_run__job_id"],
        provider=str(provider or "openai"),
        running=row["status"] == AttemptStatus.RUNNING,
        finished_at=row["finished_at"],
        max_cost_usd=row["seed_run__job__max_cost_usd"],
        max_tokens=row["seed_run__job__max_tokens"],
        rollout_limits=row["seed_run__job__rollout_limits"] or None,
    )


def attempts_ended(*, attempt_ids: list[int]) -> dict[int, datetime | None]:
    """Of these attempts, the ones no longer running, with when they ended: one query by
    primary key, however many calls the attempts make."""
    ended: dict[int, datetime | None] = {}
    for start in range(0, len(attempt_ids), 900):
        rows = (
            RolloutAttempt.objects.filter(pk__in=attempt_ids[start : start + 900])
            .exclude(status=AttemptStatus.RUNNING)
            .values_list("id", "finished_at")
        )
        ended.update(rows)
    return ended


def attempt_spent(*, attempt_id: int) -> tuple[int, float]:
    """(tokens, cost) of one attempt's calls as recorded by every web process: what its
    per-rollout token and cost limits are checked against. Failed tries that were retried
    are not calls of their own."""
    refused = (
        Q(error__startswith=BUDGET_EXCEEDED)
        | Q(error__startswith=ROLLOUT_LIMIT_EXCEEDED)
        | Q(error__contains=RETRIED_MARK)
    )
    row = (
        LLMCall.objects.filter(attempt_id=attempt_id)
        .exclude(refused)
        .aggregate(tokens=Sum("total_tokens"), cost=Sum("cost_usd"))
    )
    return row["tokens"] or 0, row["cost"] or 0.0


def judge_access_get(*, token_hash: str) -> AttemptAccess | None:
    """A verifier judge's token (on its seed run while it judges): its calls go to the
    verifier's `backend_provider` (else the policy's provider) and are recorded as the judge's,
    on the judged seed's last succeeded attempt, and count against the job's budget."""
    row = (
        SeedRun.objects.filter(judge_token_hash=token_hash)
        .exclude(judge_token_hash="")
        .values(
            "id",
            "judge_status",
            "judged_at",
            "job_id",
            "job__policy",
            "job__verifier_config",
            "job__max_cost_usd",
            "job__max_tokens",
        )  # fmt: skip
        .first()
    )
    if row is None:
        return None
    attempt_id = (
        RolloutAttempt.objects.filter(seed_run_id=row["id"], status=AttemptStatus.SUCCEEDED)
        .order_by("-number")
        .values_list("id", flat=True)
        .first()
    )
    if attempt_id is None:
        return None
    verifier = row["job__verifier_config"] if isinstance(row["job__verifier_config"], dict) else {}
    policy = row["job__policy"] if isinstance(row["job__policy"], dict) else {}
    provider = verifier.get("backend_provider") or policy.get("provider") or "openai"
    return AttemptAccess(
        attempt_id=attempt_id,
        job_id=row["job_id"],
        provider=str(provider),
        running=row["judge_status"] == JudgeStatus.RUNNING,
        finished_at=row["judged_at"],
        max_cost_usd=row["job__max_cost_usd"],
        max_tokens=row["job__max_tokens"],
        kind="judge",
    )
