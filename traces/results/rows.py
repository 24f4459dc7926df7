"""Rows of a model read as plain named tuples, not model instances: what the traces zip and the
results read by the thousand. A row has its model's attribute names (`seed_run_id`, not
`seed_run`); a JSON field is decoded by orjson and its text kept beside it as `<name>_json`."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from functools import cache
from typing import Any

from django.db.models import JSONField, Model, QuerySet, TextField
from django.db.models.functions import Cast

from evalhub import jsonvalues
from evalhub.timestamps import values_read


def model_rows(
    queryset: QuerySet, *, exclude: tuple[str, ...] = (), decoded: bool = True
) -> Iterator[Any]:
    """The queryset's rows, without the fields in `exclude` (which the rows then lack). Not
    `decoded`, a JSON field is None until `decode` (only its text is read): text costs the
    garbage collector nothing while it waits, decoded JSON is containers it keeps walking."""
    row, plain, as_json = _row_type(queryset.model, exclude)
    texts = {f"{name}_json": Cast(name, TextField()) for name in as_json}
    absent = (None,) * len(as_json)
    for values in values_read(queryset.annotate(**texts).values_list(*plain, *texts)):
        raw = values[len(plain) :]
        json_values = tuple(_json_value(t) for t in raw) if decoded else absent
        yield row(*values[: len(plain)], *json_values, *raw)


def decode(row: Any) -> Any:
    """A row of `model_rows(decoded=False)` with its JSON fields decoded."""
    count = len(row._json_fields)
    if not count:
        return row
    start = len(row) - 2 * count  # the JSON fields, then their texts, end the row
    texts = row[start + count :]
    return row._make((*row[:start], *map(_json_value, texts), *texts))


@cache
def _row_type(
    model: type[Model], exclude: tuple[str, ...]
) -> tuple[type, tuple[str, ...], tuple[str, ...]]:
    """(row class, plain field names, JSON field names) of a model."""
    fields = [f for f in model._meta.concrete_fields if f.name not in exclude]
    plain = tuple(f.attname for f in fields if not isinstance(f, JSONField))
    as_json = tuple(f.attname for f in fields if isinstance(f, JSONField))
    row = namedtuple(f"{model.__name__}Row", (*plain, *as_json, *(f"{n}_json" for n in as_json)))
    row._json_fields = as_json
    return row, plain, as_json


def _json_value(text: str | None) -> Any:
    """A JSON field's value from its text, as Django's JSONField would decode it."""
    return None if text is None else jsonvalues.loads(text)
