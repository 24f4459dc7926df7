"""A runner's claim of a job's rollouts: which seed runs it takes, under the job row's lock,
never more than the job's `max_concurrent` under live leases over all workers (leases and
results: jobs.leases; attempts: jobs.attempts), less the claiming worker's seeds whose rollouts
it says are over, their results not written yet, while no other worker holds one of the job's
seeds (`over`: their slots at the task app are free); in that case too, up to `ahead` more:
seeds the runner holds at its gate, each posted as the task app answers another
(jobs.worker.rollouts), never counted as room for another runner.

Claimable are pending seeds whose backoff is over and running seeds whose lease expired (their
worker is gone: taken again, counted as a loss). A claim also says how many seeds it left that
another runner could take now (`room`), so the runner asks idle workers for a hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, DateTimeField, F, Min, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs import claim_statement
from jobs.attempts import Started, attempts_abandon, attempts_create
from jobs.claim_statement import Took
from jobs.events import seed_events_append
from jobs.leases import SeedFinish, job_held_elsewhere, seed_runs_finish
from jobs.models import EvalJob, JobStatus, SeedRun, SeedStatus
from jobs.verifier.judgements import judgements_claimable_at


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
    room: int = 0


def rollouts_claim(
    *, job_id: str, worker: str, limit: int, lease_s: float, token_hashes: list[str],
    ahead: int = 0,
) -> RolloutClaim:  # fmt: skip
    """Claim up to `limit` seed runs of a running job for `worker`, never more than the job's
    `max_concurrent` held under live leases over all workers (`ahead` more while no other
    worker holds one of the job's seeds: see the module), and start each one's attempt, in one
    transaction (one round of statements for both). Claimable: pending seeds whose backoff is
    over, and running seeds whose lease expired (their worker is gone). `token_hashes` holds at
    least `limit` fresh hashes, the first of them given to the attempts in order."""
    with transaction.atomic():
        took = _rollouts_started(job_id, worker, limit, lease_s, token_hashes, ahead=ahead)
    return RolloutClaim(took.got, _pending_up_to(job_id=job_id, most=took.room))


def _rollouts_started(
    job_id: str, worker: str, limit: int, lease_s: float, token_hashes: list[str],
    over: list[int] = (), ahead: int = 0,
) -> Took:  # fmt: skip
    """The claim of a runner's rollouts, `got` each with its attempt started (in the caller's
    transaction), as `_claimed` counts them. On PostgreSQL, one statement after the job row's
    lock (`jobs.claim_statement`) unless a lease expired."""
    if connection.vendor == "postgresql" and (limit > 0 or over):
        took = claim_statement.rollouts_started(
            job_id, worker, limit, lease_s, token_hashes, over, ahead
        )
        if took is not None:
            got = [(Claimed(*claimed), attempt) for claimed, attempt in took.got]
            return took._replace(got=got)
    took = _claimed(
        job_id=job_id, worker=worker, limit=limit, lease_s=lease_s, over=over, ahead=ahead
    )
    attempts = attempts_create(took.got, token_hashes, worker=worker) if took.got else []
    return took._replace(got=list(zip(took.got, attempts, strict=True)))


def results_write_and_claim(
    *,
    job_id: str,
    worker: str,
    finishes: list[SeedFinish],
    limit: int,
    lease_s: float,
    token_hashes: list[str],
    also_over: Callable[[], tuple[list[int], list[str]]] | None = None,
    ahead: int = 0,
) -> tuple[list[bool], RolloutClaim, list[int]]:
    """`seed_runs_finish` of a batch of results, then the claim of up to `limit` rollouts to
    replace them (`rollouts_claim`, with no `room`), in one transaction. A seed counts against
    `max_concurrent` until its result is written, so a slot claimed in a round of its own came
    back a write and a claim after its rollout ended; here it is taken again as it is freed.
    The results are written before the job row is locked for the claim: other workers' result
    writes never wait for this one's.

    `also_over`, asked once the results are written, names the worker's seed runs whose
    rollouts ended while they were (their results wait for the next batch), with a fresh token
    hash for each: while no other worker holds the job's seeds, their slots are taken again by
    this claim too, not a batch later (another worker's claims cannot know of them, and would
    count them as held).
    Returns (which results were written, the claim, those seed runs if the slots of all of
    them were taken). One whose lease was lost meanwhile holds no slot; then none is said to be
    free, and the runner, counting them held a batch longer, claims less rather than more."""
    with transaction.atomic():
        written = seed_runs_finish(worker=worker, finishes=finishes)
        over, hashes = also_over() if also_over is not None else ([], [])
        took = _rollouts_started(
            job_id, worker, limit, lease_s, [*token_hashes[:limit], *hashes], over, ahead
        )
    return written, RolloutClaim(took.got), over if took.over_freed == len(over) else []


def _claimed(
    *, job_id: str, worker: str, limit: int, lease_s: float, over: list[int] = (), ahead: int = 0
) -> Took:
    """The claim of `rollouts_claim` (in its transaction) but its attempts' rows: `got` the seed
    runs claimed, in id order (their `attempts` counted on), `room` the job's free slots left
    for other runners when it took all it asked for, else 0 (`_pending_up_to` tells how many of
    them another runner could fill now), and `over_freed`, how many of `over` held no slot:
    `worker`'s running seeds whose rollouts ended, their results not written yet, while no
    other worker holds one of the job's seeds (a seed more claimed for each). Every claim of the job waits for the job
    row's lock, held here for three statements (the lock, the running seeds counted, one
    UPDATE that picks, claims and returns) and the attempts' INSERT: across seven, a worker
    held to a tenth of a CPU held it for hundreds of milliseconds."""
    if limit <= 0 and not over:
        return Took([], 0, 0)
    now = timezone.now()
    # The job row lock serializes claims on one job across workers (PostgreSQL); SQLite
    # takes its write lock when the transaction begins (transaction_mode IMMEDIATE).
    # NO KEY: inserting an event takes a key-share lock on the job row, which must not
    # wait for a claim (a claim may wait for that event's seed row: a deadlock).
    locked = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id)
    job = locked.values("status", "max_concurrent", "completed_at").first()
    if job is None or job["status"] != JobStatus.RUNNING or job["completed_at"] is not None:
        return Took([], 0, 0)  # over, or ending (jobs.ending)
    seeds = SeedRun.objects.filter(job_id=job_id)
    counts = {"live": Count("pk", filter=Q(lease_expires_at__gt=now)),
              "expired": Count("pk", filter=Q(lease_expires_at__lte=now))}  # fmt: skip
    if over or ahead:  # while no other worker holds one of the job's seeds
        counts["others"] = Count("pk", filter=~Q(lease_owner=worker))
    if over:  # ended, their results not written yet: no slot held while no other worker runs
        counts["over"] = Count("pk", filter=Q(lease_expires_at__gt=now, pk__in=list(over),
                                              lease_owner=worker))  # fmt: skip
    running = seeds.filter(status=SeedStatus.RUNNING).aggregate(**counts)
    alone = (over or ahead) and running["others"] == 0
    freed = running["over"] if over and alone else 0
    free = job["max_concurrent"] - running["live"] + freed
    slots = min(limit + freed, free + (ahead if alone else 0))
    if slots <= 0:
        return Took([], 0, freed)
    expired = _expired_take(seeds=seeds, slots=slots, now=now) if running["expired"] else []
    claimed = _claim_update(
        job_id=job_id, worker=worker, expired=expired, pending=slots - len(expired),
        until=now + timedelta(seconds=lease_s), now=now,
    )  # fmt: skip
    return Took(claimed, max(0, free - slots) if len(claimed) >= slots else 0, freed)


def _claim_update(
    *, job_id: str, worker: str, expired: list[int], pending: int, until, now
) -> list[Claimed]:
    """Claim `expired` and the first `pending` claimable pending seeds, their attempts counted
    on, returning their rows."""
    ids = ", ".join(["%s"] * len(expired))
    taken = f"{_c['id']} IN ({ids}) OR " if expired else ""
    at = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL.format(taken=taken), [
            SeedStatus.RUNNING, worker, at(until), at(now), *expired, job_id,
            SeedStatus.PENDING, at(now), pending, SeedStatus.PENDING, at(now),
            SeedStatus.RUNNING, at(now)])  # fmt: skip
        return sorted(Claimed(*row) for row in cursor.fetchall())


def _pending_up_to(*, job_id: str, most: int) -> int:
    """The job's pending seeds whose backoff is over, up to `most`: room for other runners."""
    pending = SeedRun.objects.filter(_pending_now(timezone.now()), job_id=job_id)
    # No order (SeedRun's is the job's, a join and a sort of every pending seed): 11-17 ms.
    return pending.order_by().values("id")[:most].count() if most > 0 else 0


def _pending_now(now) -> Q:
    """A seed claimable as pending: waiting, its backoff (if any) over (in SQL,
    `claim_statement.pending_now_sql`)."""
    return Q(status=SeedStatus.PENDING) & (Q(not_before__isnull=True) | Q(not_before__lte=now))


_c = {f.name: connection.ops.quote_name(f.column) for f in SeedRun._meta.concrete_fields}
# Parameters: SeedStatus.PENDING, now.
_PENDING_NOW_SQL = claim_statement.pending_now_sql(status="%s", now="%s")
_CLAIM_SQL = (
    f"UPDATE {connection.ops.quote_name(SeedRun._meta.db_table)} SET {_c['status']} = %s,"
    f" {_c['lease_owner']} = %s, {_c['lease_expires_at']} = %s, {_c['not_before']} = NULL,"
    f" {_c['started_at']} = COALESCE({_c['started_at']}, %s),"
    f" {_c['attempts']} = {_c['attempts']} + 1"
    f" WHERE ({{taken}}{_c['id']} IN (SELECT {_c['id']}"
    f" FROM {connection.ops.quote_name(SeedRun._meta.db_table)} WHERE {_c['job']} = %s"
    f" AND {_PENDING_NOW_SQL} ORDER BY {_c['id']} LIMIT %s))"
    # What was claimable still is: pending, or running with its lease expired.
    f" AND ({_PENDING_NOW_SQL} OR {_c['status']} = %s AND {_c['lease_expires_at']} <= %s)"
    f" RETURNING {', '.join(_c[name] for name in Claimed._fields)}"
)


@dataclass(frozen=True)
class Left:
    """What is left of a job for a runner: seconds until it could claim something (0: now;
    None: nothing is open), and whether other runners hold leases on it."""

    claim_in: float | None
    held_elsewhere: bool = False


def job_left(*, job_id: str, worker: str) -> Left:
    """What is left of the job for `worker`'s runner: its rollouts' and judgements' next
    claims, and the leases other runners hold. Nothing for a job that is ending (its end
    is finished by the runner's `_finish`) or over."""
    if EvalJob.objects.filter(pk=job_id, completed_at__isnull=False).exists():
        return Left(None)
    now = timezone.now()
    times = [
        rollouts_claimable_at(job_id=job_id, now=now),
        judgements_claimable_at(job_id=job_id, now=now),
    ]
    at = min((t for t in times if t is not None), default=None)
    if at is None:
        return Left(None)
    held = job_held_elsewhere(job_id=job_id, worker=worker, now=now)
    return Left(max(0.0, (at - now).total_seconds()), held)


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
    """Fail the seeds lost with their worker too often, each with its event."""
    error = (
        f"lost with its worker {settings.EVALHUB_SEED_MAX_LOSSES} times "
        "(EVALHUB_SEED_MAX_LOSSES); the task app was never the cause"
    )
    SeedRun.objects.filter(pk__in=seed_run_ids).update(
        status=SeedStatus.FAILED, error=error, finished_at=now, lease_owner="",
        lease_expires_at=None,
    )  # fmt: skip
    seed_events_append(seed_run_ids=sorted(seed_run_ids))
