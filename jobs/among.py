"""A filter on a column being one of many values, `Among("field", values)`: on PostgreSQL one
array parameter (`field = ANY(%s)`), elsewhere `field IN (...)` as Django writes it.

Why not `field__in=values`: psycopg turns a statement's `%s` placeholders into PostgreSQL's
`$n` in Python, with a regular expression over the whole statement, and keeps the result only
for statements of at most 50 parameters and 4 KiB. An IN list of a thousand ids is converted
anew on every execution: 10 ms and more of CPU a statement, a third of a job summary's time
(its result rows are read a thousand seed runs at a time). With one parameter the statement is
the same text whatever the ids, converted once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import BooleanField, Expression, F


class Among(Expression):
    """`filter(Among("attempt__seed_run_id", ids))`: rows whose `field` is one of `values`
    (any path `F` takes; none at all matches no row)."""

    conditional = True
    output_field = BooleanField()

    def __init__(self, field: str, values: Iterable[Any]) -> None:
        super().__init__()
        self.column, self.values = F(field), list(values)

    def resolve_expression(self, query=None, allow_joins=True, reuse=None, summarize=False,
                           for_save=False):  # fmt: skip
        resolved = self.copy()
        resolved.column = self.column.resolve_expression(
            query, allow_joins, reuse, summarize, for_save
        )
        return resolved

    def as_sql(self, compiler, connection):
        column, params = compiler.compile(self.column)
        if not self.values:
            return "1 = 0", []
        if connection.vendor == "postgresql":
            return f"{column} = ANY(%s)", [*params, self.values]
        return f"{column} IN ({', '.join(['%s'] * len(self.values))})", [*params, *self.values]
