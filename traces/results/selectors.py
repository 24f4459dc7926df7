"""Reads the interceptor needs: who a token belongs to. (What a job or an attempt has spent
so far is `traces.results.totals.job_spent`, `attempt_spent`.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.models import AttemptStatus, JudgeStatus, RolloutAttempt, SeedRun
from jobs.replays import ON_MISS_ASK, ON_MISS_FAIL


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
    # The job replays another's recorded answers (traces.calls.replay): what a miss gets. A
    # judge's calls are replayed in a replay and in a re-judgement too (`judge_on_miss`).
    replay_on_miss: str = ""
    # The job's cache of answers ({scope, ttl_s}), its owner and the attempt's repeat index.
    cache: dict | None = None
    owner_id: int = 0
    repeat: int = 0

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
            "seed_run__job__replay_on_miss",
            "seed_run__job__cache",
            "seed_run__job__owner_id",
            "seed_run__repeat",
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
        replay_on_miss=row["seed_run__job__replay_on_miss"],
        cache=row["seed_run__job__cache"] or None,
        owner_id=row["seed_run__job__owner_id"],
        repeat=row["seed_run__repeat"],
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


def judge_access_get(*, token_hash: str) -> AttemptAccess | None:
    """A verifier judge's token (on its seed run while it judges): its calls go to the
    verifier's `backend_provider` (else the policy's provider) and are recorded as the judge's,
    on the judged seed's last succeeded attempt, and count against the job's budget; in a
    replay or a re-judgement they are answered from the recorded judge calls when they match."""
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
            "job__replay_of_id",
            "job__replay_on_miss",
            "job__judged_from_id",
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
        replay_on_miss=judge_on_miss(
            replay_of=row["job__replay_of_id"],
            on_miss=row["job__replay_on_miss"],
            judged_from=row["job__judged_from_id"],
        ),  # fmt: skip
    )


def judge_on_miss(*, replay_of: str | None, on_miss: str, judged_from: str | None) -> str:
    """What a judge's call that matches no recorded judge call gets (docs/replay.md): in a
    replay, the job's `on_miss`; in a re-judgement, the provider's answer (ON_MISS_ASK: a new
    judge must be asked); "" (nothing is replayed) in any other job."""
    if replay_of:
        return on_miss or ON_MISS_FAIL
    return ON_MISS_ASK if judged_from else ""
