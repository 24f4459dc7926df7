"""Reads the interceptor needs: who a token belongs to. (What a job has spent so far is
`traces.totals.job_spent`.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.models import AttemptStatus, RolloutAttempt


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
        )
        .first()
    )
    if row is None:
        return None
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
    )
