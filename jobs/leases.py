"""The worker's side of a job: claims, leases, attempts and results.

Every write a worker makes is conditional on what it believes (the job is still running, it
still holds the seed's lease) and checks the row count, so a duplicated task, a worker whose
lease was taken over or a cancel racing with a result can never produce a second result.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, DateTimeField, F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs.bulk import rows_update
from jobs.events import seed_event_append, seed_events_append
from jobs.models import (
    AttemptStatus,
    EvalJob,
    JobStatus,
    RolloutAttempt,
    RunnerWait,
    SeedRun,
    SeedStatus,
)
from jobs.scores import Scores

# How long a runner that got nothing counts in its job's fair share (it asks again every half
# second while seeds wait; jobs.runner).
RUNNER_WAIT_S = 2.0


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


@dataclass(frozen=True)
class AttemptEnd:
    """How a rollout attempt ended; written with the seed's update, in one transaction."""

    attempt_id: int
    status: str
    http_status: int | None = None
    error: str | None = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class Claim:
    """The seed runs a claim got, and the runner's fair share of the job's `max_concurrent`
    (the most it may hold, 0 when the job does not run): near it, the runner claims again
    only once a batch of its rollouts has ended."""

    seed_runs: list[SeedRun]
    share: int = 0


def seed_run_claim(*, job_id: str, worker: str, limit: int, lease_s: float) -> Claim:
    """Claim up to `limit` seed runs of a running job for `worker`, never more than the job's
    `max_concurrent` held under live leases over all workers, nor more than the worker's fair
    share of it (`_free_slots`). Claimable: pending seeds whose backoff is over, and running
    seeds whose lease expired (their worker is gone)."""
    if limit <= 0:
        return Claim([])
    now = timezone.now()
    with transaction.atomic():
        # The job row lock serializes claims on one job across workers (PostgreSQL); SQLite
        # takes its write lock when the transaction begins (transaction_mode IMMEDIATE).
        # NO KEY: inserting an event takes a key-share lock on the job row, which must not
        # wait for a claim (a claim may wait for that event's seed row: a deadlock).
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.status != JobStatus.RUNNING:
            return Claim([])
        seeds = SeedRun.objects.filter(job_id=job_id)
        free, share, holding = _free_slots(seeds=seeds, job=job, worker=worker, now=now)
        slots = min(limit, free)
        if slots <= 0 and not holding:
            # The others hold every slot: it counts in their fair share while it waits.
            RunnerWait.objects.bulk_create(
                [RunnerWait(job=job, worker=worker, seen_at=now)],
                update_conflicts=True, unique_fields=["job", "worker"], update_fields=["seen_at"],
            )  # fmt: skip
        if slots <= 0:
            return Claim([], share)
        ids = _expired_take(seeds=seeds, slots=slots, now=now)
        if len(ids) < slots:
            ids += list(
                seeds.filter(status=SeedStatus.PENDING)
                .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
                .order_by("id")
                .values_list("id", flat=True)[: slots - len(ids)]
            )
        if not ids:
            return Claim([], share)
        claimed = SeedRun.objects.filter(pk__in=ids).filter(
            Q(status=SeedStatus.PENDING) | Q(status=SeedStatus.RUNNING, lease_expires_at__lte=now)
        )
        claimed.update(
            status=SeedStatus.RUNNING,
            lease_owner=worker,
            lease_expires_at=now + timedelta(seconds=lease_s),
            not_before=None,
            started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
        )
        return Claim(
            list(SeedRun.objects.filter(pk__in=ids, lease_owner=worker).order_by("id")), share
        )


def _expired_take(*, seeds, slots: int, now) -> list[int]:
    """Up to `slots` running seeds whose lease expired, to claim again. Their worker is gone:
    our fault, not the task app's. Counted as a loss, not an attempt; a seed lost too often
    (it may be what kills its worker) fails instead."""
    expired = list(
        seeds.filter(status=SeedStatus.RUNNING, lease_expires_at__lte=now)
        .order_by("id")
        .values_list("id", "losses")[:slots]
    )
    if not expired:
        return []
    expired_ids = [i for i, _ in expired]
    _attempts_abandon(seed_run_ids=expired_ids, error="the worker running it stopped")
    SeedRun.objects.filter(pk__in=expired_ids).update(losses=F("losses") + 1)
    max_losses = settings.EVALHUB_SEED_MAX_LOSSES
    spent = [i for i, n in expired if n + 1 >= max_losses]
    if spent:
        _seed_runs_fail_spent(seed_run_ids=spent, now=now)
    return [i for i, n in expired if n + 1 < max_losses]


def _free_slots(*, seeds, job: EvalJob, worker: str, now) -> tuple[int, int, bool]:
    """What `worker` may claim now, its share, and whether it holds seeds of the job. It may
    claim the job's free slots (`max_concurrent` minus every live lease), and no more than its
    share: its fair part of `max_concurrent` among the runners holding seeds of the job or
    waiting for some (`RunnerWait`), itself included. A runner that joins a running job gets
    its part as the others' rollouts end, instead of racing them for slots."""
    held = dict(
        seeds.filter(status=SeedStatus.RUNNING, lease_expires_at__gt=now)
        .values_list("lease_owner")
        .annotate(n=Count("id"))
        .order_by()
    )
    runners = len(held.keys() | runners_waiting(job_id=job.pk, now=now) | {worker})
    share = -(-job.max_concurrent // runners)
    mine = held.get(worker, 0)
    return min(job.max_concurrent - sum(held.values()), share - mine), share, mine > 0


def runners_waiting(*, job_id, now) -> set[str]:
    """The runners of the job that asked for seeds in the last RUNNER_WAIT_S and got none."""
    recent = now - timedelta(seconds=RUNNER_WAIT_S)
    return set(
        RunnerWait.objects.filter(job_id=job_id, seen_at__gt=recent).values_list(
            "worker", flat=True
        )
    )


def _attempts_abandon(*, seed_run_ids: list[int], error: str) -> None:
    RolloutAttempt.objects.filter(
        seed_run_id__in=seed_run_ids, status=AttemptStatus.RUNNING
    ).update(status=AttemptStatus.ABANDONED, finished_at=timezone.now(), error=error)


def _seed_runs_fail_spent(*, seed_run_ids: list[int], now) -> None:
    error = (
        f"lost with its worker {settings.EVALHUB_SEED_MAX_LOSSES} times "
        "(EVALHUB_SEED_MAX_LOSSES); the task app was never the cause"
    )
    for seed_run in SeedRun.objects.filter(pk__in=seed_run_ids):
        seed_run.status = SeedStatus.FAILED
        seed_run.error = error
        seed_run.finished_at = now
        seed_run.lease_owner = ""
        seed_run.lease_expires_at = None
        seed_run.save(
            update_fields=["status", "error", "finished_at", "lease_owner", "lease_expires_at"]
        )
        seed_event_append(seed_run=seed_run)


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


def rollout_attempt_start(
    *, seed_run: SeedRun, token_hash: str, worker: str = ""
) -> RolloutAttempt:
    """Count and record the start of the seed's next attempt, with a fresh run id; updates
    `seed_run.attempts` to its number."""
    return rollout_attempts_start(seed_runs=[seed_run], token_hashes=[token_hash], worker=worker)[0]


def rollout_attempts_start(
    *, seed_runs: list[SeedRun], token_hashes: list[str], worker: str = ""
) -> list[RolloutAttempt]:
    """`rollout_attempt_start` for several seed runs at once, in one transaction."""
    ids = [seed_run.pk for seed_run in seed_runs]
    with transaction.atomic():
        SeedRun.objects.filter(pk__in=ids).update(attempts=F("attempts") + 1)
        numbers = dict(SeedRun.objects.filter(pk__in=ids).values_list("id", "attempts"))
        now = timezone.now()
        for seed_run in seed_runs:
            seed_run.attempts = numbers[seed_run.pk]
        return RolloutAttempt.objects.bulk_create(
            RolloutAttempt(
                seed_run=seed_run,
                worker=worker,
                number=seed_run.attempts,
                run_id=f"run-{secrets.token_hex(12)}",
                token_hash=token_hash,
                status=AttemptStatus.RUNNING,
                started_at=now,
            )
            for seed_run, token_hash in zip(seed_runs, token_hashes, strict=True)
        )


def rollout_attempt_finish(*, end: AttemptEnd) -> None:
    rollout_attempts_finish(ends=[end])


def rollout_attempts_finish(*, ends: list[AttemptEnd]) -> None:
    """Record how the attempts ended: one statement, run for each."""
    now = timezone.now()
    rows_update(
        RolloutAttempt,
        [
            ({"id": end.attempt_id, "status": AttemptStatus.RUNNING},
             {"status": end.status, "http_status": end.http_status, "error": end.error,
              "latency_ms": end.latency_ms, "finished_at": now})
            for end in ends
        ],
    )  # fmt: skip


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
    that arrive while its last write runs together); for each, whether it was written. The
    seed runs `worker` still holds are locked and read first, then every result is written by
    one statement."""
    with transaction.atomic():
        rollout_attempts_finish(ends=[f.attempt for f in finishes if f.attempt is not None])
        ids = [f.seed_run_id for f in finishes]
        held = set(
            _held_seed_runs(seed_run_ids=ids, worker=worker)
            .select_for_update()
            .values_list("id", flat=True)
        )
        written = [f.seed_run_id in held for f in finishes]
        rows_update(SeedRun, [_result_row(f, worker) for f in finishes if f.seed_run_id in held])
        done = [i for i in ids if i in held]
        if done:
            seed_events_append(seed_run_ids=done)
    return written


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
    charged: bool = True,
) -> bool:
    """Give the seed back (pending) after a transient failure; no worker may start it before
    `delay_s` seconds have passed. A `charged` failure was the task app's and counts against
    its attempts; one that was ours (`charged=False`) counts as a loss."""
    now = timezone.now()
    counter = "failures" if charged else "losses"
    with transaction.atomic():
        if attempt is not None:
            rollout_attempt_finish(end=attempt)
        updated = _release(
            _held_seed_runs(seed_run_ids=[seed_run_id], worker=worker),
            status=SeedStatus.PENDING,
            not_before=now + timedelta(seconds=delay_s),
            error=error,
            **{counter: F(counter) + 1},
        )
    return bool(updated)


def seed_runs_cancel(*, seed_run_ids: list[int], worker: str) -> int:
    """The job was cancelled while `worker` ran these: mark them and their attempts cancelled."""
    now = timezone.now()
    with transaction.atomic():
        held = _held_seed_runs(seed_run_ids=seed_run_ids, worker=worker)
        ids = list(held.values_list("id", flat=True))
        _release(held, status=SeedStatus.CANCELLED, error="cancelled", finished_at=now)
        RolloutAttempt.objects.filter(seed_run_id__in=ids, status=AttemptStatus.RUNNING).update(
            status=AttemptStatus.CANCELLED, finished_at=now, error="cancelled"
        )
    return len(ids)
