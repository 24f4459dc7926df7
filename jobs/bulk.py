"""Inserting a job's seed runs in bulk: 100,000 rows (the API's maximum) in a few seconds.

Django's `bulk_create` builds a model instance per row and prepares every field of every row,
which took most of a minute for 100,000 seeds. A new seed run differs from the next only by its
seed and repeat, so every other column's value is prepared once, from the model's own defaults (any field
added to `SeedRun` with a default is filled the same way), and rows go in as multi-row INSERT
statements (SQLite) or one COPY (PostgreSQL). The workers' attempts and results are written
the same way: `rows_insert` and `rows_update`, one statement built once per shape of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection, connections, router
from django.db.models import Model

from jobs.bulk_values import rows_arrays, rows_doc, rows_docs, values_prepare
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


def rows_update(
    model: type[Model],
    rows: list[tuple[dict[str, Any], dict[str, Any]]],
    *,
    returning: tuple[str, ...] = (),
) -> list[tuple]:
    """`model.objects.filter(**where).update(**values)` (equalities only) for each (where,
    values) of `rows`, all of one shape, no two rows meeting the same row of the table: the
    ORM's building of these statements per result was most of a busy worker's database time.
    The values are prepared as `update` would (`values_prepare`). On PostgreSQL one statement
    joins the table to the rows given as `rows_insert` gives them (`rows_source`): an
    executemany's pipeline had psycopg quote every value of every row in Python, a tenth of a
    busy worker's CPU. On SQLite, one executemany (in C).
    With `returning` (field names), the rows updated, those fields' values after the update,
    in no set order: what a SELECT ... FOR UPDATE before it would have read, without its
    round trip (SQLite, whose executemany returns no rows, runs a statement per row)."""
    if not rows:
        return []
    where, values = rows[0]
    given = [(*v.values(), *w.values()) for w, v in rows]
    shape = (model, tuple(where), tuple(values), returning)
    if connection.vendor != "postgresql":
        sql, fields = _update_statement(*shape, None)
        with connection.cursor() as cursor:
            if not returning:
                cursor.executemany(sql, [values_prepare(fields, row) for row in given])
                return []
            got = []
            for row in given:
                cursor.execute(sql, values_prepare(fields, row))
                got.extend(cursor.fetchall())
            return got
    fields = _update_statement(*shape, True)[1]
    got = []
    with connection.cursor() as cursor:
        for doc, part in rows_docs(fields, given):
            sql = _update_statement(*shape, doc is not None)[0]
            cursor.execute(sql, [doc] if doc is not None else rows_arrays(fields, part))
            if returning:
                got.extend(cursor.fetchall())
    return got


def rows_insert(
    model: type[Model], columns: tuple[str, ...], rows: list[tuple], *, update_on: str = ""
) -> list[Any]:
    """Insert `rows`, the values of the fields named `columns` in order, as `bulk_create`
    would (every other field takes its default, or its database default, or NULL; no
    `pre_save` such as `auto_now` runs), in one statement; their ids in order (read as
    `bulk_create` reads them: RETURNING, in the order of the rows). With `update_on` (a unique
    field of `columns`), a row whose value of it is taken updates that row's other `columns`
    instead, as `bulk_create(update_conflicts=True)` does (no two rows with the same value).
    `bulk_create` builds a model instance and prepares every field of every row, a third of a
    worker's claims' CPU; here the statement is built once per shape and the values prepared
    by `values_prepare`.
    On PostgreSQL the rows go as one parameter, a JSON document (`rows_doc`; else one array
    per column, UNNEST, as `bulk_create` does): psycopg parses a statement of more than 50
    parameters anew each time, in Python."""
    if not rows:
        return []
    if connection.vendor != "postgresql":
        sql, fields, defaulted = _insert_statement(model, columns, len(rows), update_on, None)
        given = [(*row, *(f.get_default() for f in defaulted)) for row in rows]
        params = [value for row in given for value in values_prepare(fields, row)]
    else:
        _, fields, defaulted = _insert_statement(model, columns, 1, update_on, True)
        given = [(*row, *(f.get_default() for f in defaulted)) for row in rows]
        doc = rows_doc(fields, given)
        sql = _insert_statement(model, columns, 1, update_on, doc is not None)[0]
        params = [doc] if doc is not None else rows_arrays(fields, given)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def rows_source(fields: tuple, doc: bool) -> str:
    """PostgreSQL: a relation `r` of the rows given, columns v0, v1... the values of `fields`:
    from one array per field (UNNEST), or with `doc` from one JSON document (`rows_doc`),
    parsed once as jsonb. As `json`, text, each `->>` parsed its row again from the start: a
    row's twentieth field cost twenty parses of it, its trace included (a batch of 80 results
    with traces of 8 KB: 106 ms as json, 32 ms as jsonb)."""
    if not doc:
        arrays = ", ".join(f"%s::{_array_type(f)}[]" for f in fields)
        return f"UNNEST({arrays}) AS r({', '.join(f'v{n}' for n in range(len(fields)))})"
    columns = []
    for n, field in enumerate(fields):
        kind = _array_type(field)
        if kind == "jsonb":  # JSON's null: SQL's NULL, as the field writes None
            columns.append(f"NULLIF((e->{n})::jsonb, 'null'::jsonb) AS v{n}")
        elif kind == "bytea":
            columns.append(f"decode(e->>{n}, 'base64') AS v{n}")
        else:
            columns.append(f"(e->>{n})::{kind} AS v{n}")
    return f"(SELECT {', '.join(columns)} FROM jsonb_array_elements(%s::jsonb) AS e) AS r"


@cache
def _update_statement(
    model: type[Model],
    where: tuple[str, ...],
    values: tuple[str, ...],
    returning: tuple[str, ...],
    doc: bool | None,
):
    """(SQL, fields of the values then of the conditions) of `rows_update`: one row's
    statement (`doc` None), or every row's from `rows_source` (PostgreSQL)."""
    q = connection.ops.quote_name
    fields = tuple(model._meta.get_field(name) for name in (*values, *where))
    table = q(model._meta.db_table)
    back = ""
    if returning:
        columns = (model._meta.get_field(name).column for name in returning)
        back = " RETURNING " + ", ".join(f"{table}.{q(column)}" for column in columns)
    if doc is None:
        sets = ", ".join(f"{q(f.column)} = %s" for f in fields[: len(values)])
        conditions = " AND ".join(f"{q(f.column)} = %s" for f in fields[len(values) :])
        return f"UPDATE {table} SET {sets} WHERE {conditions}{back}", fields
    # The values' columns are r.v0, r.v1...; the conditions' follow them.
    sets = ", ".join(f"{q(f.column)} = r.v{n}" for n, f in enumerate(fields[: len(values)]))
    conditions = " AND ".join(
        f"{table}.{q(f.column)} = r.v{n}"
        for n, f in enumerate(fields[len(values) :], start=len(values))
    )
    source = rows_source(fields, doc)
    return f"UPDATE {table} SET {sets} FROM {source} WHERE {conditions}{back}", fields


@cache
def _insert_statement(
    model: type[Model], columns: tuple[str, ...], count: int, update_on: str, doc: bool | None
):
    """(SQL, fields of the columns then of the defaulted ones, the defaulted ones) of
    `rows_insert`: of `count` rows (`doc` None), or of any number from `rows_source`
    (PostgreSQL)."""
    q = connection.ops.quote_name
    given = [model._meta.get_field(name) for name in columns]
    defaulted = [
        f for f in model._meta.concrete_fields
        if not f.primary_key and f not in given and not f.has_db_default()
        and (f.has_default() or not f.null)
    ]  # fmt: skip
    fields = (*given, *defaulted)
    into = f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(f.column) for f in fields)})"
    returning = f"RETURNING {q(model._meta.pk.column)}"
    if update_on:
        key = model._meta.get_field(update_on)
        sets = ", ".join(f"{q(f.column)} = EXCLUDED.{q(f.column)}" for f in given if f != key)
        returning = f"ON CONFLICT ({q(key.column)}) DO UPDATE SET {sets} {returning}"
    if doc is not None:
        values = ", ".join(f"r.v{n}" for n in range(len(fields)))
        return (
            f"{into} SELECT {values} FROM {rows_source(fields, doc)} {returning}",
            fields,
            defaulted,
        )
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return f"{into} VALUES {', '.join([row] * count)} {returning}", fields, defaulted


def _array_type(field) -> str:
    """The PostgreSQL type of a field's values in `rows_source`: without its parameters
    (varchar, not varchar(64)): nothing is cut short."""
    return field.db_type(connection).split("(")[0]
