"""The worker's side of a job: leases and results (its claims: jobs.claims; its attempts:
jobs.attempts).

Every write a worker makes is conditional on what it believes (the job is still running, it
still holds the seed's lease) and checks the row count, so a duplicated task, a worker whose
lease was taken over or a cancel racing with a result can never produce a second result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs.attempts import (
    AttemptEnd,
    rollout_attempt_finish,
    rollout_attempts_finish,
)
from jobs.bulk import rows_update
from jobs.events import seed_events_append
from jobs.models import (
    JudgeStatus,
    SeedRun,
    SeedStatus,
)
from jobs.scores import Scores


@dataclass(frozen=True)
class SeedResult:
    """What a finished rollout wrote into its seed run."""

    scores: Scores = Scores()
    metrics: dict[str, Any] | None = None
    task_trace: Any = None
    latency_ms: float | None = None
    error: str | None = None
    # The task app's own score when `scores.score` is the verifier's reward (jobs/verifier/),
    # and the state of the seed's judgement ("pending": a judge will score it).
    task_app_score: float | None = None
    judge_status: str = ""


def job_held_elsewhere(*, job_id: str, worker: str, now: datetime) -> bool:
    """Whether runners other than `worker` hold live leases on the job's rollouts or
    judgements (they send the job's message again when their slice ends)."""
    rollouts = Q(status=SeedStatus.RUNNING, lease_expires_at__gt=now) & ~Q(lease_owner=worker)
    judging = Q(judge_status=JudgeStatus.RUNNING, judge_lease_expires_at__gt=now) & ~Q(
        judge_lease_owner=worker
    )
    return SeedRun.objects.filter(job_id=job_id).filter(rollouts | judging).exists()


def leases_of_lost_workers_release(*, live: set[str], now: datetime) -> set[str]:
    """Expire the live leases of rollouts and judgements held by worker processes that are
    not in `live` ("host:pid" of the workers whose heartbeats are recent): they died, and what
    they held can be taken over now instead of a lease period later. Returns the jobs touched.
    A worker taken for dead that was not (its heartbeats stopped, its work did not) loses only
    its writes: results need the lease."""
    seeds = SeedRun.objects.filter(status=SeedStatus.RUNNING, lease_expires_at__gt=now)
    judged = SeedRun.objects.filter(
        judge_status=JudgeStatus.RUNNING, judge_lease_expires_at__gt=now
    )
    owners = set(seeds.values_list("lease_owner", flat=True).distinct())
    owners |= set(judged.values_list("judge_lease_owner", flat=True).distinct())
    lost = [owner for owner in owners if owner.rsplit(":", 1)[0] not in live]
    if not lost:
        return set()
    jobs = set(seeds.filter(lease_owner__in=lost).values_list("job_id", flat=True))
    jobs |= set(judged.filter(judge_lease_owner__in=lost).values_list("job_id", flat=True))
    seeds.filter(lease_owner__in=lost).update(lease_expires_at=now)
    judged.filter(judge_lease_owner__in=lost).update(judge_lease_expires_at=now)
    return jobs


def seed_run_lease_renew(*, seed_run_ids: list[int], worker: str, lease_s: float) -> set[int]:
    """Extend the leases `worker` still holds; returns the ids it holds (a seed that is missing
    was cancelled or taken over: its rollout must stop)."""
    if not seed_run_ids:
        return set()
    held = SeedRun.objects.filter(
        pk__in=seed_run_ids, status=SeedStatus.RUNNING, lease_owner=worker
    )
    held.update(lease_expires_at=timezone.now() + timedelta(seconds=lease_s))
    return set(held.values_list("id", flat=True))


def _held(worker: str) -> dict[str, Any]:
    """What a seed run `worker` still holds is: results are written only to such rows."""
    return {"status": SeedStatus.RUNNING, "lease_owner": worker}


# What giving a lease up writes.
_RELEASED = {"lease_owner": "", "lease_expires_at": None}


def _held_seed_runs(*, seed_run_ids: list[int], worker: str):
    """The seed runs `worker` still holds."""
    return SeedRun.objects.filter(pk__in=seed_run_ids, **_held(worker))


def _release(held, **fields) -> int:
    """Update the held seed runs and give their leases up."""
    return held.update(**_RELEASED, **fields)


def seed_run_finish(
    *,
    seed_run_id: int,
    worker: str,
    status: str,
    result: SeedResult,
    attempt: AttemptEnd | None = None,
) -> bool:
    """Write the seed's one result, if `worker` still holds it; records the seed event (and
    how the attempt ended, which is recorded either way: it was spent)."""
    finish = SeedFinish(seed_run_id=seed_run_id, status=status, result=result, attempt=attempt)
    return seed_runs_finish(worker=worker, finishes=[finish])[0]


@dataclass(frozen=True)
class SeedFinish:
    """One seed's result, for `seed_runs_finish`."""

    seed_run_id: int
    status: str
    result: SeedResult
    attempt: AttemptEnd | None = None


def seed_runs_finish(*, worker: str, finishes: list[SeedFinish]) -> list[bool]:
    """`seed_run_finish` for several seeds in one transaction (the runner writes the results
    that arrive while its last write runs together); for each, whether it was written. One
    statement writes every result to the seed runs `worker` still holds and returns what
    their events need of them (a SELECT ... FOR UPDATE of them before it was a round trip
    more of a batch's dozen). No savepoint of its own: inside a caller's transaction (the
    runner's `claims.results_write_and_claim`) a failure fails the caller's whole batch.
    A result whose attempt was no longer running is not written: a claim took its seed again
    after the lease ran out (while the database was away, say), possibly by this worker, whose
    new attempt's result may be in the same batch."""
    with transaction.atomic(savepoint=False):
        running = rollout_attempts_finish(
            ends=[f.attempt for f in finishes if f.attempt is not None]
        )
        current = [f for f in finishes if f.attempt is None or f.attempt.attempt_id in running]
        # In id order, the order a claim of expired leases takes its rows' locks in.
        by_id = sorted(current, key=lambda f: f.seed_run_id)
        results = [_result_row(f, worker) for f in by_id]
        held = {
            row[0]: row[1:]
            for row in rows_update(
                SeedRun, results, returning=("id", "job_id", "seed", "repeat", "attempts")
            )
        }
        ours = [f for f in current if f.seed_run_id in held]
        if ours:
            # Each event says what was just written: the rows are not read again for it.
            seed_events_append(
                seed_run_ids=[f.seed_run_id for f in ours],
                rows={f.seed_run_id: _event_row(f, *held[f.seed_run_id]) for f in ours},
            )
    written = {id(f) for f in ours}
    return [id(f) in written for f in finishes]


def _event_row(finish: SeedFinish, job_id: str, seed: int, repeat: int, attempts: int) -> tuple:
    """(job id, the fields of `jobs.events.SEED_FIELDS`) of a result as `_result_row` writes it."""
    result = finish.result
    return (job_id, seed, repeat, finish.status, result.scores.score, result.error, attempts,
            result.latency_ms)  # fmt: skip


def _result_row(finish: SeedFinish, worker: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(where, values) of `_release` of the held seed run with its result."""
    result = finish.result
    values = {
        **_RELEASED,
        "status": finish.status,
        **result.scores.as_fields(),
        "metrics": result.metrics,
        "task_trace": result.task_trace,
        "latency_ms": result.latency_ms,
        "error": result.error,
        "finished_at": timezone.now(),
        "task_app_score": result.task_app_score if result.judge_status else result.scores.score,
        "judge_status": result.judge_status,
    }
    return {"id": finish.seed_run_id, **_held(worker)}, values


def seed_run_retry_later(
    *,
    seed_run_id: int,
    worker: str,
    delay_s: float,
    error: str,
    attempt: AttemptEnd | None = None,
    charged: bool | None = True,
) -> bool:
    """Give the seed back (pending) after a transient failure; no worker may start it before
    `delay_s` seconds have passed. A `charged` failure was the task app's and counts against
    its attempts; one that was ours (`charged=False`) counts as a loss; back-pressure from the
    environment (`charged=None`) counts as neither."""
    now = timezone.now()
    counter = {True: "failures", False: "losses", None: ""}[charged]
    counted = {counter: F(counter) + 1} if counter else {}
    with transaction.atomic():
        if attempt is not None and not rollout_attempt_finish(end=attempt):
            return False  # abandoned meanwhile: the seed is another attempt's now
        updated = _release(
            _held_seed_runs(seed_run_ids=[seed_run_id], worker=worker),
            status=SeedStatus.PENDING,
            not_before=now + timedelta(seconds=delay_s),
            error=error,
            **counted,
        )
    return bool(updated)
