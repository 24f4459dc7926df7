"""A job's numbered events (`JobEvent`): what clients follow through the API and the SSE stream."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from jobs.bulk import rows_insert
from jobs.locks import NUMBERING, job_xact_lock_then
from jobs.models import EvalJob, JobEvent, SeedRun, SeedStatus


class EventType(models.TextChoices):
    """Every type of job event: the `type` of a `JobEvent`, the `event:` of the SSE stream."""

    JOB_CREATED = "eval.policy.job.created"
    SEED_COMPLETED = "eval.policy.seed.completed"
    JOB_COMPLETED = "eval.policy.job.completed"
    JOB_FAILED = "eval.policy.job.failed"
    JOB_CANCELLED = "eval.policy.job.cancelled"
    # The environment said it is at capacity; its samples wait and are tried again, uncharged.
    ENVIRONMENT_BUSY = "eval.policy.environment.busy"


# A job's last event: nothing follows one of these.
TERMINAL_EVENT_TYPES = frozenset(
    {EventType.JOB_COMPLETED, EventType.JOB_FAILED, EventType.JOB_CANCELLED}
)


def job_event_append(
    *, job_id: str, type: EventType, data: dict[str, Any], message: str = ""
) -> JobEvent:
    """Append an event with the next sequence number of the job (1, 2, ...)."""
    payload = dict(data)
    if message:
        payload.setdefault("message", message)
    [row] = _append(job_id, [(type, payload)])
    return JobEvent(**dict(zip(_COLUMNS, row, strict=True)))


def _append(
    job_id: str, events: list[tuple[EventType, dict[str, Any]]], *, make=None
) -> list[tuple]:
    """Append `events` in order, numbered on from the job's last; the rows written, values of
    `_COLUMNS` (no model instances: the worker appends with every batch of results). Written
    out, one SELECT and one INSERT. `make(cursor, progress)`, when given, makes the events
    instead, from the progress the job's last seed event counted, (completed, total) or
    (None, None), read by the numbering's statement (read again with it if another process
    took the numbers). The rows go in as one statement (`jobs.bulk.rows_insert`: one array
    per column on PostgreSQL, where an executemany had psycopg quote each value in Python).
    On PostgreSQL the numbering's lock means no number is ever taken twice: no savepoint is made
    for a retry inside a caller's transaction (the runner's batch of results), two round trips
    of a batch's dozen; a collision there would fail the caller's transaction."""
    numbered_alone = connection.vendor == "postgresql"
    for _ in range(10):
        try:
            with transaction.atomic(savepoint=not numbered_alone), connection.cursor() as cursor:
                # Numbered one transaction at a time: the lock, and the last number read under it.
                if make is None:
                    job_xact_lock_then(cursor, NUMBERING, job_id, _LAST_SEQ_SQL, [job_id])
                    last = cursor.fetchone()[0] or 0
                else:
                    params = [job_id, job_id, EventType.SEED_COMPLETED, job_id]
                    job_xact_lock_then(cursor, NUMBERING, job_id, _LAST_SQL, params)
                    last, *progress = cursor.fetchone()
                    last = last or 0
                    events = make(cursor, tuple(progress))
                now = timezone.now()
                rows = [
                    (job_id, last + n, type, data, now)
                    for n, (type, data) in enumerate(events, start=1)
                ]
                rows_insert(JobEvent, _COLUMNS, rows)
                return rows
        except IntegrityError:
            if numbered_alone and connection.in_atomic_block:
                raise  # the caller's transaction is broken: it cannot read again
            continue  # another process took those numbers; read again
    raise RuntimeError(f"could not append events to job {job_id}: their numbers kept being taken")


_q = connection.ops.quote_name


def _json_int(key: str) -> str:
    """SQL: the integer under `key` of an event's data (a JSON object)."""
    if connection.vendor == "postgresql":
        return f"CAST({_q('data')} ->> '{key}' AS INTEGER)"
    return f"CAST(json_extract({_q('data')}, '$.{key}') AS INTEGER)"


# What an event row is written with (any other field needs a database default).
_COLUMNS = ("job_id", "seq", "type", "data", "created_at")
_LAST_SEQ_SQL = (
    f"SELECT MAX({_q('seq')}) FROM {_q(JobEvent._meta.db_table)} WHERE {_q('job_id')} = %s"
)
# How far back from a job's last event its last seed event is looked for (other events are
# a handful a job); further back, its progress is counted (`_progress_before`).
LAST_SEED_EVENT_WITHIN = 64
# The job's last number, and what its last seed event says of its progress: (completed,
# total), or NULLs. One statement, so one snapshot: a batch of results reads them together.
# The seed event is looked for among the last events by number, a range of the (job, seq)
# index: asked for the job's last one of its type, PostgreSQL planned (with the statistics of a
# table that grew since they were taken) a scan and a sort of every event of the job, per
# batch: 3.6 ms at 4,000 seeds, growing with the job.
_LAST_SQL = (
    f"SELECT ({_LAST_SEQ_SQL}), p.completed, p.total FROM (SELECT 1 AS one) AS o LEFT JOIN"
    f" (SELECT {_json_int('completed')} AS completed, {_json_int('total')} AS total"
    f" FROM {_q(JobEvent._meta.db_table)} WHERE {_q('job_id')} = %s AND {_q('type')} = %s"
    f" AND {_q('seq')} > ({_LAST_SEQ_SQL}) - {LAST_SEED_EVENT_WITHIN}"
    f" ORDER BY {_q('seq')} DESC LIMIT 1) AS p ON 1 = 1"
)
# The job's samples over (its progress) and how many it has.
_PROGRESS_SQL = (
    f"SELECT (SELECT COUNT(*) FROM {_q(SeedRun._meta.db_table)} WHERE {_q('job_id')} = %s"
    f" AND {_q('status')} IN (%s, %s)), {_q('num_samples')}"
    f" FROM {_q(EvalJob._meta.db_table)} WHERE {_q('id')} = %s"
)


# What a seed's event says of it: the result as it was written.
SEED_FIELDS = ("seed", "repeat", "status", "score", "error", "attempts", "latency_ms")


def seed_event_append(*, seed_run: SeedRun) -> None:
    """The seed run is over: its event carries the result as it was written, and the job's
    progress (`completed` of `total` seeds), which stream followers show."""
    seed_events_append(seed_run_ids=[seed_run.pk])


def seed_events_append(*, seed_run_ids: list[int], rows: dict[int, tuple] | None = None) -> None:
    """`seed_event_append` for several seed runs that are over, each job's numbered in the order
    given; the last of a job's events counts them all in its `completed`. `rows`, when given,
    holds for each id what was just written, (job id, *SEED_FIELDS), so that it is not read."""
    if rows is None:
        rows = {
            row[0]: row[1:]
            for row in SeedRun.objects.filter(pk__in=seed_run_ids).values_list(
                "id", "job_id", *SEED_FIELDS
            )
        }
    for job_id in dict.fromkeys(rows[pk][0] for pk in seed_run_ids):
        ids = [pk for pk in seed_run_ids if rows[pk][0] == job_id]
        _job_seed_events(job_id, [rows[pk][1:] for pk in ids])


def _job_seed_events(job_id: str, results: list[tuple]) -> None:
    def with_progress(cursor, progress: tuple) -> list[tuple[EventType, dict[str, Any]]]:
        before, total = _progress_before(cursor, job_id, len(results), progress)
        return [
            (EventType.SEED_COMPLETED,
             {**dict(zip(SEED_FIELDS, result, strict=True)), "completed": before + 1 + n,
              "total": total})
            for n, result in enumerate(results)
        ]  # fmt: skip

    _append(job_id, [], make=with_progress)


def _progress_before(cursor, job_id: str, written: int, last: tuple) -> tuple[int, int | None]:
    """(the job's seeds over before the `written` just now, its samples), with `_append`'s
    numbering. From the job's last seed event (`last`: its completed and total, when it is
    among its last LAST_SEED_EVENT_WITHIN events), which counted them: every seed over since
    has an event of its own, numbered after it (a seed is over once; those a job starts with,
    reused by a rerun, are counted by its first). Counted for every batch, a job of 100,000
    seeds read some fifty million index entries. Read by the numbering's statement, an event
    another process wrote meanwhile is seen by both or by neither (then the numbers collide and
    both are read again). A job's first batch counts."""
    if last[0] is not None:
        return last[0], last[1]
    cursor.execute(_PROGRESS_SQL, [job_id, SeedStatus.SUCCEEDED, SeedStatus.FAILED, job_id])
    completed, total = cursor.fetchone() or (0, None)
    return completed - written, total
