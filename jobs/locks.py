"""PostgreSQL advisory locks on a job: the one home of their key spaces.

A lock's first key is its space (what it guards), the second the job's id hashed: two locks on
one job in different spaces never wait for each other. On SQLite, where a write transaction
holds the whole database, neither is taken; see each caller for why that is enough there.

- `NUMBERING` (transaction-level, `job_xact_lock_then`): a job's event numbers are taken one
  transaction at a time (`jobs.events`). Without it the workers writing a job's results at
  once read the same last number, and all but one of their INSERTs waited for the first to
  commit, failed, and were written again.
- `FINISHING` (session-level, `job_lock_try`): one process at a time makes a finished job's
  summary (`jobs.services.job_finish_if_done`). The runners of every worker on a job see it
  over at once as its last results land, and each made the summary, a pass over every row,
  for one of them to write it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import DatabaseError, connection

NUMBERING = 7
FINISHING = 8


_XACT_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"


def job_xact_lock_then(cursor, space: int, job_id: str, sql: str, params: list) -> None:
    """Wait for the job's lock in `space` (held until the transaction `cursor` runs in ends),
    then run `sql` on `cursor`, whose rows it is left on. On PostgreSQL one round trip: two
    statements in one message (Django's psycopg cursors bind parameters on the client, which
    allows it), the second run with a snapshot of its own once the lock is held."""
    if connection.vendor != "postgresql":
        cursor.execute(sql, params)
        return
    cursor.execute(f"{_XACT_LOCK_SQL}; {sql}", [space, job_id, *params])
    cursor.nextset()


@contextlib.contextmanager
def job_lock_try(space: int, job_id: str) -> Iterator[bool]:
    """Whether this process holds the job's lock in `space` for the block (True at once when
    free, False when another session holds it; always True on SQLite). Released as the block
    ends, or with the connection if that fails."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = [space, job_id]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", key)
        ours = cursor.fetchone()[0]
    try:
        yield ours
    finally:
        if ours:
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)
