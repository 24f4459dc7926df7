"""Inserting a job's seed runs in bulk: 100,000 rows (the API's maximum) in a few seconds.

Django's `bulk_create` builds a model instance per row and prepares every field of every row,
which took most of a minute for 100,000 seeds. A new seed run differs from the next only by its
seed and repeat, so every other column's value is prepared once, from the model's own defaults (any field
added to `SeedRun` with a default is filled the same way), and rows go in as multi-row INSERT
statements (SQLite) or one COPY (PostgreSQL). The workers' results are written the same way:
`rows_update`, one statement built once per shape of row.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection, connections, router
from django.db.models import Model

from jobs.models import EvalJob, SeedRun

# Parameters per statement: below SQLite's (32,766) and PostgreSQL's (65,535) limits.
MAX_PARAMS = 30_000


def seed_runs_insert(*, job: EvalJob, seeds: Sequence[int], repeats: int = 1) -> None:
    """One pending seed run of `job` per seed and repeat, as `SeedRun(job=job, seed=seed,
    repeat=r)` would be."""
    connection = connections[router.db_for_write(SeedRun)]
    fields = [f for f in SeedRun._meta.concrete_fields if not f.primary_key]
    template = SeedRun(job=job, seed=0)
    values = [f.get_db_prep_save(f.pre_save(template, add=True), connection) for f in fields]
    seed_at = [f.attname for f in fields].index("seed")
    repeat_at = [f.attname for f in fields].index("repeat")
    samples = [(seed, r) for seed in seeds for r in range(repeats)]
    quote = connection.ops.quote_name
    table_columns = (
        f"{quote(SeedRun._meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"
    )
    if connection.vendor == "postgresql":
        _copy(connection, table_columns, values, (seed_at, repeat_at), samples)
        return
    head = f"INSERT INTO {table_columns} VALUES "
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per_statement = max(1, MAX_PARAMS // len(fields))
    with connection.cursor() as cursor:
        for start in range(0, len(samples), per_statement):
            batch = samples[start : start + per_statement]
            params: list = []
            for seed, repeat in batch:
                values[seed_at] = seed
                values[repeat_at] = repeat
                params.extend(values)
            cursor.execute(head + ", ".join([row_sql] * len(batch)), params)


def _copy(connection, table_columns: str, values: list, at: tuple[int, int], samples: list):
    """PostgreSQL: COPY, which takes rows as fast as they are written (psycopg formats them
    in C), where INSERT's parameters are quoted one by one."""
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table_columns} FROM STDIN") as copy,
    ):
        for seed, repeat in samples:
            values[at[0]], values[at[1]] = seed, repeat
            copy.write_row(values)


def rows_update(model: type[Model], rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """`model.objects.filter(**where).update(**values)` (equalities only) for each (where,
    values) of `rows`, all of one shape, written out as one executemany (one round trip on
    PostgreSQL, whose driver pipelines it): the ORM's building of these statements per result
    was most of a busy worker's database time. The values are prepared by their fields as
    `update` would."""
    if not rows:
        return
    where, values = rows[0]
    sql, fields = _update_statement(model, tuple(where), tuple(values))
    with connection.cursor() as cursor:
        cursor.executemany(sql, [_update_params(fields, w, v) for w, v in rows])


def _update_params(fields, where: dict[str, Any], values: dict[str, Any]) -> list:
    given = (*values.values(), *where.values())
    return [f.get_db_prep_save(v, connection) for f, v in zip(fields, given, strict=True)]


@cache
def _update_statement(model: type[Model], where: tuple[str, ...], values: tuple[str, ...]):
    """(SQL, fields of the values then of the conditions) of `rows_update`."""
    q = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in (*values, *where)]
    sets = ", ".join(f"{q(f.column)} = %s" for f in fields[: len(values)])
    conditions = " AND ".join(f"{q(f.column)} = %s" for f in fields[len(values) :])
    return f"UPDATE {q(model._meta.db_table)} SET {sets} WHERE {conditions}", fields
