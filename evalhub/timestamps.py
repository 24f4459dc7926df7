"""Rows read with PostgreSQL's timestamps parsed by psycopg's own loader, in C.

Django registers a loader of its own on every PostgreSQL connection: a Python subclass of
psycopg's whose only work is to give each value the connection's time zone, and a subclass in
Python runs psycopg's parsing in Python too (5 times the CPU of its C loader, which no class
may extend). psycopg's loader already gives a session in UTC (Django sets the session's zone to
`TIME_ZONE`, "UTC" here) `datetime.timezone.utc`, the value Django's gives. `values_read`
reads a `values_list` query on a cursor with psycopg's loader: the result rows, the zip's rows
and the pages of calls, by the thousand, two timestamps and more a row.
"""

from __future__ import annotations

import datetime

import psycopg
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet
from psycopg.pq import Format

_TIMESTAMPTZ = psycopg.postgres.types["timestamptz"].oid
# psycopg's loader of timestamps with a time zone: its C implementation when installed.
_PSYCOPG_LOADER = psycopg.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)


def values_read(queryset: QuerySet) -> list[tuple]:
    """The rows of a `values_list` queryset, as it gives them. On PostgreSQL in UTC, when none
    of its values needs a converter (numbers, text, booleans, timestamps; not a JSON field,
    which `traces.results.rows.model_rows` reads as text), its statement runs on a cursor
    reading timestamps with psycopg's loader; else the queryset is read as usual."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql" or connection.timezone != datetime.UTC:
        return list(queryset)
    compiler = queryset.query.get_compiler(using=queryset.db)
    try:
        sql, params = compiler.as_sql()
    except EmptyResultSet:  # `none()`, or a filter on no value at all: no statement to run
        return []
    if compiler.get_converters([column for column, *_ in compiler.select[: compiler.col_count]]):
        return list(queryset)
    with connection.cursor() as cursor:
        cursor.cursor.adapters.register_loader(_TIMESTAMPTZ, _PSYCOPG_LOADER)
        cursor.execute(sql, params)
        return cursor.fetchall()
