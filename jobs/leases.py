"""The worker's side of a job: claims, leases and results (its attempts: jobs.attempts).

Every write a worker makes is conditional on what it believes (the job is still running, it
still holds the seed's lease) and checks the row count, so a duplicated task, a worker whose
lease was taken over or a cancel racing with a result can never produce a second result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, DateTimeField, F, Min, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs.attempts import (
    AttemptEnd,
    Started,
    attempts_abandon,
    attempts_create,
    rollout_attempt_finish,
    rollout_attempts_finish,
)
from jobs.bulk import rows_update
from jobs.events import seed_event_append, seed_events_append
from jobs.models import (
    EvalJob,
    JobStatus,
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


@dataclass(frozen=True)
class Claim:
    """The seed runs a claim got, and how many more the job had to claim now than the claim's
    `limit` let it take (0: none; other runners could lend a hand)."""

    seed_runs: list[SeedRun]
    more: int = 0


def seed_run_claim(*, job_id: str, worker: str, limit: int, lease_s: float) -> Claim:
    """Claim up to `limit` seed runs of a running job for `worker`, never more than the job's
    `max_concurrent` held under live leases over all workers. Claimable: pending seeds whose
    backoff is over, and running seeds whose lease expired (their worker is gone)."""
    with transaction.atomic():
        claimed, room = _claimed(job_id=job_id, worker=worker, limit=limit, lease_s=lease_s)
        ids = [c.id for c in claimed]
        seed_runs = list(SeedRun.objects.filter(pk__in=ids).order_by("id")) if ids else []
    return Claim(seed_runs, _pending_up_to(job_id=job_id, most=room))


class Claimed(NamedTuple):
    """What a rollout needs of a seed run it claimed (`attempts` counts the one started)."""

    id: int
    seed: int
    repeat: int
    attempts: int
    failures: int
    losses: int


@dataclass(frozen=True)
class RolloutClaim:
    """`Claim` of `rollouts_claim`: each seed run claimed with its attempt started."""

    rollouts: list[tuple[Claimed, Started]]
    more: int = 0


def rollouts_claim(
    *, job_id: str, worker: str, limit: int, lease_s: float, token_hashes: list[str]
) -> RolloutClaim:
    """`seed_run_claim` and `rollout_attempts_start` of what it claimed, in one transaction
    (the runner's, one round of statements for both); `token_hashes` holds at least `limit`
    fresh hashes, the first of them given to the attempts in order."""
    with transaction.atomic():
        claimed, room = _claimed(
            job_id=job_id, worker=worker, limit=limit, lease_s=lease_s, attempt=True
        )
        attempts = attempts_create(claimed, token_hashes, worker=worker) if claimed else []
    more = _pending_up_to(job_id=job_id, most=room)
    return RolloutClaim(list(zip(claimed, attempts, strict=True)), more)


def _claimed(
    *, job_id: str, worker: str, limit: int, lease_s: float, attempt: bool = False
) -> tuple[list[Claimed], int]:
    """The claim of `seed_run_claim` (in its transaction): the seed runs claimed, in id order
    (their `attempts` counted on with `attempt`), and the job's free slots left for other
    runners when it took all it asked for, else 0 (`_pending_up_to` tells how many of them
    another runner could fill now). Every claim of the job waits for the job row's lock, held
    here for three statements (the lock, the running seeds counted, one UPDATE that picks,
    claims and returns) and the attempts' INSERT: across seven, a worker held to a tenth of a
    CPU held it for hundreds of milliseconds."""
    if limit <= 0:
        return [], 0
    now = timezone.now()
    # The job row lock serializes claims on one job across workers (PostgreSQL); SQLite
    # takes its write lock when the transaction begins (transaction_mode IMMEDIATE).
    # NO KEY: inserting an event takes a key-share lock on the job row, which must not
    # wait for a claim (a claim may wait for that event's seed row: a deadlock).
    locked = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id)
    job = locked.values("status", "max_concurrent").first()
    if job is None or job["status"] != JobStatus.RUNNING:
        return [], 0
    seeds = SeedRun.objects.filter(job_id=job_id)
    running = seeds.filter(status=SeedStatus.RUNNING).aggregate(
        live=Count("pk", filter=Q(lease_expires_at__gt=now)),
        expired=Count("pk", filter=Q(lease_expires_at__lte=now)),
    )
    free = job["max_concurrent"] - running["live"]
    slots = min(limit, free)
    if slots <= 0:
        return [], 0
    expired = _expired_take(seeds=seeds, slots=slots, now=now) if running["expired"] else []
    claimed = _claim_update(
        job_id=job_id, worker=worker, expired=expired, pending=slots - len(expired),
        until=now + timedelta(seconds=lease_s), now=now, attempt=attempt,
    )  # fmt: skip
    return claimed, free - slots if len(claimed) >= slots else 0


def _claim_update(
    *, job_id: str, worker: str, expired: list[int], pending: int, until, now, attempt: bool
) -> list[Claimed]:
    """Claim `expired` and the first `pending` claimable pending seeds, returning their rows."""
    ids = ", ".join(["%s"] * len(expired))
    taken = f"{_c['id']} IN ({ids}) OR " if expired else ""
    at = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL.format(taken=taken), [
            SeedStatus.RUNNING, worker, at(until), at(now), int(attempt), *expired, job_id,
            SeedStatus.PENDING, at(now), pending, SeedStatus.PENDING, at(now),
            SeedStatus.RUNNING, at(now)])  # fmt: skip
        return sorted(Claimed(*row) for row in cursor.fetchall())


def _pending_up_to(*, job_id: str, most: int) -> int:
    """The job's pending seeds whose backoff is over, up to `most`: more for other runners."""
    waiting = Q(not_before__isnull=True) | Q(not_before__lte=timezone.now())
    pending = SeedRun.objects.filter(waiting, job_id=job_id, status=SeedStatus.PENDING)
    return pending.values("id")[:most].count() if most > 0 else 0


_c = {f.name: connection.ops.quote_name(f.column) for f in SeedRun._meta.concrete_fields}
_CLAIM_SQL = (
    f"UPDATE {connection.ops.quote_name(SeedRun._meta.db_table)} SET {_c['status']} = %s,"
    f" {_c['lease_owner']} = %s, {_c['lease_expires_at']} = %s, {_c['not_before']} = NULL,"
    f" {_c['started_at']} = COALESCE({_c['started_at']}, %s),"
    f" {_c['attempts']} = {_c['attempts']} + %s"
    f" WHERE ({{taken}}{_c['id']} IN (SELECT {_c['id']}"
    f" FROM {connection.ops.quote_name(SeedRun._meta.db_table)} WHERE {_c['job']} = %s"
    f" AND {_c['status']} = %s AND ({_c['not_before']} IS NULL OR {_c['not_before']} <= %s)"
    f" ORDER BY {_c['id']} LIMIT %s))"
    # What was claimable still is: pending, or running with its lease expired.
    f" AND ({_c['status']} = %s AND ({_c['not_before']} IS NULL OR {_c['not_before']} <= %s)"
    f" OR {_c['status']} = %s AND {_c['lease_expires_at']} <= %s)"
    f" RETURNING {', '.join(_c[name] for name in Claimed._fields)}"
)


def rollouts_claimable_at(*, job_id: str, now: datetime) -> datetime | None:
    """When a runner could next claim a rollout of the job (`now` or earlier: at once): a
    pending seed's backoff ends, or a running seed's lease expires (its worker may be gone).
    None when no rollout is open."""
    seeds = SeedRun.objects.filter(job_id=job_id)
    pending = seeds.filter(status=SeedStatus.PENDING).aggregate(
        at=Min(Coalesce("not_before", Value(now, output_field=DateTimeField())))
    )["at"]
    running = seeds.filter(status=SeedStatus.RUNNING).aggregate(at=Min("lease_expires_at"))["at"]
    return min((at for at in (pending, running) if at is not None), default=None)


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
    attempts_abandon(seed_run_ids=expired_ids, error="the worker running it stopped")
    SeedRun.objects.filter(pk__in=expired_ids).update(losses=F("losses") + 1)
    max_losses = settings.EVALHUB_SEED_MAX_LOSSES
    spent = [i for i, n in expired if n + 1 >= max_losses]
    if spent:
        _seed_runs_fail_spent(seed_run_ids=spent, now=now)
    return [i for i, n in expired if n + 1 < max_losses]


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
        held = {
            row[0]: row[1:]
            for row in _held_seed_runs(seed_run_ids=ids, worker=worker)
            .select_for_update()
            .values_list("id", "job_id", "seed", "repeat", "attempts")
        }
        written = [f.seed_run_id in held for f in finishes]
        rows_update(SeedRun, [_result_row(f, worker) for f in finishes if f.seed_run_id in held])
        if held:
            # Each event says what was just written: the rows are not read again for it.
            seed_events_append(
                seed_run_ids=[f.seed_run_id for f in finishes if f.seed_run_id in held],
                rows={f.seed_run_id: _event_row(f, *held[f.seed_run_id]) for f in finishes
                      if f.seed_run_id in held},
            )  # fmt: skip
    return written


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
        if attempt is not None:
            rollout_attempt_finish(end=attempt)
        updated = _release(
            _held_seed_runs(seed_run_ids=[seed_run_id], worker=worker),
            status=SeedStatus.PENDING,
            not_before=now + timedelta(seconds=delay_s),
            error=error,
            **counted,
        )
    return bool(updated)
