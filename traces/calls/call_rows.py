"""The SQL of LLM call rows, written by the interceptor's writer threads
(`traces.calls.recording`): numbered per attempt, inserted, completed in place.

Every statement is written out rather than built by the ORM: a lone call's ORM aggregate and
`bulk_create` cost several times the database work. On PostgreSQL a batch's rows go as one
parameter, a JSON document orjson writes in C (`jobs.bulk_values.rows_params`, read by
`jobs.bulk.rows_source`): psycopg quoted every value in Python, and escaped every double quote
of the big request and response documents with a regular expression, most of a web process's
CPU per proxied call. SQLite keeps its executemany and multi-row INSERTs."""

from __future__ import annotations

import functools
from itertools import groupby
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models.base import ModelState

from jobs.bulk import rows_source
from jobs.bulk_values import rows_params, values_prepare
from traces.models import LLMCall


def call_new(**values: Any) -> LLMCall:
    """An unsaved `LLMCall(**values)` (field attnames only), every field not given at its
    default, without `Model.__init__`'s work per field and its signals (no receiver listens
    to this model's): a quarter as much CPU, and the writer threads make two a call."""
    call = LLMCall.__new__(LLMCall)
    call._state = ModelState()
    fields = call.__dict__
    for attname, default in _defaults():
        fields[attname] = values.pop(attname) if attname in values else default()
    if values:
        raise TypeError(f"LLMCall has no field {sorted(values)[0]!r}")
    return call


@functools.cache
def _defaults() -> tuple[tuple[str, Any], ...]:
    return tuple((f.attname, f.get_default) for f in LLMCall._meta.concrete_fields)


def calls_number(calls: list[LLMCall]) -> None:
    """Number `calls` (sorted by attempt) after the last call each attempt has stored: one
    statement, a MAX per attempt, each answered from the (attempt, seq) index's last entry."""
    ids = sorted({call.attempt_id for call in calls})
    table = connection.ops.quote_name(LLMCall._meta.db_table)
    one = f"SELECT %s, (SELECT MAX(seq) FROM {table} WHERE attempt_id = %s)"
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join([one] * len(ids)), [i for i in ids for _ in (0, 1)])
        last = dict(cursor.fetchall())
    for attempt_id, group in groupby(calls, key=lambda c: c.attempt_id):
        for i, call in enumerate(group, start=(last.get(attempt_id) or 0) + 1):
            call.seq = i


def calls_insert(calls: list[LLMCall]) -> None:
    """INSERT the rows; each value prepared by its field, as the ORM would."""
    conn = connections[DEFAULT_DB_ALIAS]  # the thread's connection, looked up once
    if conn.vendor == "postgresql":
        _execute_rows(conn, "insert", calls)
        return
    fields, sql = _insert_statement(conn.vendor)
    rows = [values_prepare(fields, [getattr(c, f.attname) for f in fields]) for c in calls]
    with conn.cursor() as cursor:
        cursor.executemany(sql, rows)


def calls_insert_numbered(calls: list[LLMCall]) -> None:
    """INSERT the rows (sorted by attempt), many a statement (on PostgreSQL all in one), each
    numbered in it after its attempt's last stored call (the database reads every row's MAX
    before it inserts any); each call gets its id and number back."""
    conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor == "postgresql":
        _number_places(calls)
        _numbers_take(calls, _execute_rows(conn, "numbered", calls)[0])
        return
    fields, sql = _insert_statement(conn.vendor)
    head = sql.partition(" VALUES ")[0]
    after = f"(SELECT COALESCE(MAX(seq), 0) FROM {conn.ops.quote_name(LLMCall._meta.db_table)}"
    marks = ", ".join(f"{after} WHERE attempt_id = %s) + %s" if f.attname == "seq" else "%s"
                      for f in fields)  # fmt: skip
    per = (conn.features.max_query_params or 30_000) // (len(fields) + 1)
    seq_at = [f.attname for f in fields].index("seq")
    with conn.cursor() as cursor:
        for start in range(0, len(calls), per):
            chunk, params = calls[start : start + per], []
            for attempt_id, group in groupby(chunk, key=lambda c: c.attempt_id):
                for i, call in enumerate(group, start=1):
                    values = values_prepare(fields, [getattr(call, f.attname) for f in fields])
                    values[seq_at : seq_at + 1] = (attempt_id, i)
                    params.extend(values)
            values = ", ".join([f"({marks})"] * len(chunk))
            cursor.execute(f"{head} VALUES {values} RETURNING id, attempt_id, seq", params)
            _numbers_take(chunk, cursor.fetchall())


def _numbers_take(calls: list[LLMCall], got: list[tuple]) -> None:
    """Give `calls` (sorted by attempt) the (id, attempt, number) rows their INSERT returned:
    per attempt, its rows came numbered in the calls' order."""
    got = sorted(got, key=lambda row: (row[1], row[2]))
    for call, (pk, _, seq) in zip(calls, got, strict=True):
        call.pk, call.seq = pk, seq


def _number_places(calls: list[LLMCall]) -> None:
    """Each call's place among its attempt's calls (1, 2...), as its `seq` until the database
    adds the attempt's last stored number (`_rows_statement`'s "numbered")."""
    for _, group in groupby(calls, key=lambda c: c.attempt_id):
        for i, call in enumerate(group, start=1):
            call.seq = i


def _execute_rows(conn, kind: str, calls: list[LLMCall]) -> tuple[list[tuple], int]:
    """PostgreSQL: one statement of `kind` (`_rows_statement`) for all `calls`, their rows one
    parameter (`jobs.bulk_values.rows_params`); (the rows it returned, how many it changed)."""
    fields = _rows_statement(kind, True)[0]
    doc, params = rows_params(fields, [[getattr(c, f.attname) for f in fields] for c in calls])
    with conn.cursor() as cursor:
        cursor.execute(_rows_statement(kind, doc)[1], params)
        return (cursor.fetchall() if kind == "numbered" else []), cursor.rowcount


def calls_update(calls: list[LLMCall]) -> None:
    """UPDATE rows written ahead with what their calls brought (not their number, attempt or
    request, which the row has)."""
    if not calls:
        return
    conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor == "postgresql":
        updated = _execute_rows(conn, "update", calls)[1]
    else:
        fields, sql = _update_statement(conn.vendor)
        rows = [
            [*values_prepare(fields, [getattr(c, f.attname) for f in fields]), c.pk] for c in calls
        ]
        with conn.cursor() as cursor:
            cursor.executemany(sql, rows)
            updated = cursor.rowcount
    if updated == len(calls):
        return
    # A row the database lost (its commit did not reach the disk before PostgreSQL crashed,
    # see `traces.calls.recording._commit_unawaited`): the call is inserted whole.
    present = set(LLMCall.objects.filter(pk__in=[c.pk for c in calls]).values_list("pk", flat=True))
    missing = [call for call in calls if call.pk not in present]
    for call in missing:
        call.pk = None
    if missing:
        calls_number(missing)
        calls_insert(missing)


@functools.cache
def _insert_statement(vendor: str) -> tuple[tuple, str]:
    fields = tuple(f for f in LLMCall._meta.concrete_fields if not f.primary_key)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    return fields, f"INSERT INTO {quote(LLMCall._meta.db_table)} ({columns}) VALUES ({marks})"


@functools.cache
def _update_statement(vendor: str) -> tuple[tuple, str]:
    kept_ = {"id", "attempt_id", "seq", "request"}
    fields = tuple(f for f in LLMCall._meta.concrete_fields if f.attname not in kept_)
    quote = connection.ops.quote_name
    columns = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    return fields, f"UPDATE {quote(LLMCall._meta.db_table)} SET {columns} WHERE id = %s"


@functools.cache
def _rows_statement(kind: str, doc: bool) -> tuple[tuple, str]:
    """PostgreSQL: (fields, SQL) of one statement reading its rows from `rows_source`: the
    rows of `calls_insert` ("insert"); of `calls_insert_numbered` ("numbered"), each numbered
    its attempt's last stored number plus its place (its `seq` given); of `calls_update`."""
    table = connection.ops.quote_name(LLMCall._meta.db_table)
    if kind == "update":
        fields = (*_update_statement("postgresql")[0], LLMCall._meta.pk)
        sets = ", ".join(f"{connection.ops.quote_name(f.column)} = r.v{n}"
                         for n, f in enumerate(fields[:-1]))  # fmt: skip
        where = f"{table}.id = r.v{len(fields) - 1}"
        return fields, f"UPDATE {table} SET {sets} FROM {rows_source(fields, doc)} WHERE {where}"
    fields, sql = _insert_statement("postgresql")
    values, returning = [f"r.v{n}" for n in range(len(fields))], ""
    if kind == "numbered":
        at = {f.attname: n for n, f in enumerate(fields)}
        last = f"SELECT COALESCE(MAX(seq), 0) FROM {table} WHERE attempt_id = r.v{at['attempt_id']}"
        values[at["seq"]] = f"({last}) + r.v{at['seq']}"
        returning = " RETURNING id, attempt_id, seq"
    head = sql.partition(" VALUES ")[0]
    return fields, f"{head} SELECT {', '.join(values)} FROM {rows_source(fields, doc)}{returning}"
