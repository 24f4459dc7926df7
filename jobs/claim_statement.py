"""PostgreSQL: a runner's claim of rollouts as one statement after the job row's lock.

Every claim of a job waits for the job row's lock (jobs.claims), held until the claim commits.
Taken the general way, the lock was held across three more round trips (the running seeds
counted, the claim's UPDATE, the attempts' INSERT) and the Python between them: building the
count's query, the attempts' rows. A worker held to a slice of a CPU that ran out of it there
stopped every other worker's claims until its next slice. Here, once the lock is taken, one
statement counts the running seeds, claims the pending ones the job has room for and starts
their attempts; the transaction commits as soon as its rows are read.

It takes only pending seeds. When a running seed's lease expired (its worker is gone) it
claims nothing and says so: the general claim (`jobs.claims._claimed`), in the same
transaction under the same lock, takes those first, as a loss each.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.utils import timezone

from jobs.attempts import Started
from jobs.models import AttemptStatus, EvalJob, JobStatus, RolloutAttempt, SeedRun, SeedStatus


class Took(NamedTuple):
    """What a claim took: `got` (the seed runs claimed, with their attempts where started),
    the job's free slots left for other runners (`room`), and how many of the claiming
    worker's seeds named as over held no slot (`over_freed`: a seed more was claimed for
    each)."""

    got: list[Any]
    room: int
    over_freed: int


_q = connection.ops.quote_name
_s = {f.name: _q(f.column) for f in SeedRun._meta.concrete_fields}
_a = {f.name: _q(f.column) for f in RolloutAttempt._meta.concrete_fields}
_SEEDS = _q(SeedRun._meta.db_table)


def pending_now_sql(*, status: str, now: str) -> str:
    """A seed claimable as pending, in SQL: waiting, its backoff (if any) over; `status` and
    `now` are the placeholders of SeedStatus.PENDING and the time. For every claim statement
    (this one's and `jobs.claims`'s); `jobs.claims._pending_now` says it to the ORM."""
    return (
        f"{_s['status']} = {status} AND ({_s['not_before']} IS NULL OR {_s['not_before']} <= {now})"
    )


_PENDING_NOW = pending_now_sql(status="%(pending)s", now="%(now)s")
# Claimed's fields, in order (jobs.claims.Claimed).
_CLAIMED = ("id", "seed", "repeat", "attempts", "failures", "losses")

_LOCK_SQL = (
    f"SELECT {_q('status')}, {_q('max_concurrent')}, {_q('completed_at')}"
    f" FROM {_q(EvalJob._meta.db_table)} WHERE {_q('id')} = %s FOR NO KEY UPDATE"
)
# The pending seeds come in id order from the (job, status, id) index, read no further than the
# claim takes. The statement's snapshot is taken after the lock: it sees every claim committed
# before.
_STARTED_SQL = f"""
WITH counted AS (
  SELECT count(*) FILTER (WHERE {_s["lease_expires_at"]} > %(now)s) AS live,
         count(*) FILTER (WHERE {_s["lease_expires_at"]} <= %(now)s) AS expired,
         count(*) FILTER (WHERE {_s["lease_owner"]} <> %(worker)s) AS others,
         count(*) FILTER (WHERE {_s["lease_expires_at"]} > %(now)s
                          AND {_s["id"]} = ANY(%(over)s::bigint[])
                          AND {_s["lease_owner"]} = %(worker)s) AS over
  FROM {_SEEDS} WHERE {_s["job"]} = %(job)s AND {_s["status"]} = %(running)s
), running AS (
  SELECT live - freed AS live, expired, freed, ahead
  FROM (SELECT *, CASE WHEN others = 0 THEN over ELSE 0 END AS freed,
               CASE WHEN others = 0 THEN %(ahead)s ELSE 0 END AS ahead FROM counted) AS c
), claimed AS (
  UPDATE {_SEEDS} SET {_s["status"]} = %(running)s, {_s["lease_owner"]} = %(worker)s,
    {_s["lease_expires_at"]} = %(until)s, {_s["not_before"]} = NULL,
    {_s["started_at"]} = COALESCE({_s["started_at"]}, %(now)s),
    {_s["attempts"]} = {_s["attempts"]} + 1
  WHERE {_s["id"]} IN (
    SELECT {_s["id"]} FROM {_SEEDS} WHERE {_s["job"]} = %(job)s AND {_PENDING_NOW}
    ORDER BY {_s["id"]}
    LIMIT (SELECT CASE WHEN expired > 0 THEN 0
                  ELSE GREATEST(0, LEAST(%(limit)s + freed, %(max)s + ahead - live)) END
           FROM running)
  ) AND {_PENDING_NOW}
  RETURNING {", ".join(_s[name] for name in _CLAIMED)}
), numbered AS (
  SELECT *, row_number() OVER (ORDER BY {_s["id"]}) AS n FROM claimed
), started AS (
  INSERT INTO {_q(RolloutAttempt._meta.db_table)} ({_a["seed_run"]}, {_a["worker"]},
    {_a["number"]}, {_a["run_id"]}, {_a["token_hash"]}, {_a["status"]}, {_a["started_at"]})
  SELECT c.{_s["id"]}, %(worker)s, c.{_s["attempts"]}, r.run_id, r.token_hash,
    %(attempt_running)s, %(now)s
  FROM numbered c
  JOIN UNNEST(%(run_ids)s::text[], %(hashes)s::text[]) WITH ORDINALITY AS r(run_id, token_hash, n)
    ON r.n = c.n
  RETURNING {_a["id"]}, {_a["seed_run"]}, {_a["number"]}, {_a["run_id"]}
)
SELECT r.live, r.expired, r.freed, r.ahead, {", ".join(f"c.{_s[name]}" for name in _CLAIMED)},
  s.{_a["id"]}, s.{_a["number"]}, s.{_a["run_id"]}
FROM running r LEFT JOIN (numbered c JOIN started s ON s.{_a["seed_run"]} = c.{_s["id"]}) ON TRUE
ORDER BY c.{_s["id"]}
"""


def rollouts_started(
    job_id: str, worker: str, limit: int, lease_s: float, token_hashes: list[str],
    over: list[int] = (), ahead: int = 0,
) -> Took | None:  # fmt: skip
    """In the caller's transaction, under the job row's lock: up to `limit` pending seeds
    claimed, and one more for each of `over` that holds no slot, each with its attempt
    started (the first of `token_hashes` given to them in order), `got` as (the values of
    `jobs.claims.Claimed`, its attempt), counted as `jobs.claims._claimed` counts them. None
    when a running seed's lease expired: nothing was claimed, and the general claim takes
    over."""
    now = timezone.now()
    most = limit + len(over)
    run_ids = [f"run-{secrets.token_hex(12)}" for _ in range(most)]
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_SQL, [job_id])
        job = cursor.fetchone()
        if job is None or job[0] != JobStatus.RUNNING or job[2] is not None:
            return Took([], 0, 0)  # over, or ending (jobs.ending)
        max_concurrent = job[1]
        cursor.execute(_STARTED_SQL, {
            "now": now, "until": now + timedelta(seconds=lease_s), "job": job_id,
            "running": SeedStatus.RUNNING, "pending": SeedStatus.PENDING, "worker": worker,
            "limit": limit, "max": max_concurrent, "attempt_running": AttemptStatus.RUNNING,
            "run_ids": run_ids, "hashes": token_hashes[:most], "over": list(over), "ahead": ahead,
        })  # fmt: skip
        rows = cursor.fetchall()
    live, expired, freed, alone_ahead = rows[0][0], rows[0][1], rows[0][2], rows[0][3]
    if expired:
        return None
    got = [(row[4:10], Started(*row[10:13])) for row in rows if row[4] is not None]
    free = max_concurrent - live
    slots = min(limit + freed, free + alone_ahead)
    return Took(got, max(0, free - slots) if slots > 0 and len(got) >= slots else 0, freed)
