"""The values of rows written in bulk (`jobs.bulk`), as the database takes them: prepared as
their fields would prepare them (`values_prepare`), and on PostgreSQL as the parameters of one
statement, a JSON document orjson writes in C (`rows_params`, `rows_docs`) or one array per
field when a value has no exact JSON form (`rows_arrays`)."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator

import orjson
from django.db import connection
from django.db.models import JSONField

from jobs.figures import JsonText


def rows_params(fields: tuple, rows: list[tuple]) -> tuple[bool, list]:
    """PostgreSQL: `rows` (the values of `fields` in order, prepared as `values_prepare`
    prepares them) as the parameters of `rows_source(fields, doc)`: (True, [one JSON
    document]), or (False, one array per field) when a value has no exact JSON form."""
    doc = rows_doc(fields, rows)
    return (True, [doc]) if doc is not None else (False, rows_arrays(fields, rows))


def rows_arrays(fields: tuple, rows: list[tuple]) -> list[list]:
    """The rows' values, prepared, as one array per field (`rows_source` of arrays)."""
    prepared = [values_prepare(fields, row) for row in rows]
    return [list(column) for column in zip(*prepared, strict=True)]


def rows_doc(fields: tuple, rows: list[tuple]) -> str | None:
    """The rows as one JSON document, an array of the values of each (`rows_source` of
    JSON), or None when a value has no exact JSON form (a float that is not finite, an
    integer beyond 64 bits, a Decimal...): those rows go as arrays. orjson writes it in C,
    where psycopg quotes the values of arrays one by one in Python, escaping every quote of
    a JSON value with a regular expression: most of a busy worker's database CPU."""
    kinds = _json_kinds(fields)
    try:
        return orjson.dumps([_json_row(fields, kinds, row) for row in rows]).decode()
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None


# A statement's JSON document is encoded, decoded and sent: three copies of the rows it holds,
# beyond the rows themselves. `rows_update` sends rows in documents of about this size (a bigger
# row alone), so that a batch of big results (task apps' traces of megabytes, held within the
# worker's answer budget while they wait to be written) costs a few of these beyond the
# budget, not three times the batch.
STATEMENT_BYTES = 4 * 2**20


def rows_docs(fields: tuple, rows: list[tuple]) -> Iterator[tuple[str | None, list[tuple]]]:
    """The rows in order, in JSON documents of about STATEMENT_BYTES (`rows_doc`'s form),
    each with the rows it holds, made as they are asked for; a row with a value that has no
    exact JSON form as (None, [that row]), for the arrays of `rows_source`."""
    kinds = _json_kinds(fields)
    part: list[tuple] = []
    encoded: list[bytes] = []
    size = 0
    for row in rows:
        try:
            one = orjson.dumps(_json_row(fields, kinds, row))
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            one = None
        if encoded and (one is None or size + len(one) > STATEMENT_BYTES):
            yield _joined(encoded), part
            part, encoded, size = [], [], 0
        if one is None:
            yield None, [row]
            continue
        part.append(row)
        encoded.append(one)
        size += len(one)
    if encoded:
        yield _joined(encoded), part


def _joined(encoded: list[bytes]) -> str:
    """Encoded rows as one JSON array; `encoded` emptied as it goes (its copy is not kept)."""
    doc = b"[" + b",".join(encoded) + b"]"
    encoded.clear()
    return doc.decode()


def _json_row(fields: tuple, kinds: tuple, row: tuple) -> list:
    """A row of `rows_doc`: its values as `_json_value` writes them."""
    return [_json_value(f, k, v) for f, k, v in zip(fields, kinds, row, strict=True)]


def _json_value(field, kind: tuple[str, frozenset[type]], value):
    """A value of `rows_doc`, as `values_prepare` would prepare it."""
    code, as_is = kind
    if value is None or (code == "plain" and type(value) in as_is):
        return value
    if code == "json":
        if isinstance(value, JsonText):
            return orjson.Fragment(value.text)
        if field.encoder is None:  # encoded by the document's own orjson.dumps
            return value
        return orjson.Fragment(json.dumps(value, cls=field.encoder, allow_nan=False))
    if code == "binary":
        return base64.b64encode(value).decode()
    value = field.get_db_prep_save(value, connection)
    if code == "float" and value is not None and not math.isfinite(value):
        raise ValueError("JSON has no NaN or infinity")
    return value


def _json_kinds(fields: tuple) -> tuple[tuple[str, frozenset[type]], ...]:
    """For each field, how `_json_value` writes its values, and the types passed as they are."""
    kept = _json_kinds_kept.get(id(fields))
    if kept is None or kept[0] is not fields:
        internal = [(f.target_field if f.is_relation else f).get_internal_type() for f in fields]
        codes = {"JSONField": "json", "BinaryField": "binary", "FloatField": "float"}
        kinds = tuple(
            (codes.get(kind, "plain"), as_is)
            for kind, as_is in zip(internal, _as_is(fields), strict=True)
        )
        if len(_json_kinds_kept) > 1000:
            _json_kinds_kept.clear()
        kept = _json_kinds_kept[id(fields)] = (fields, kinds)
    return kept[1]


_json_kinds_kept: dict[int, tuple[tuple, tuple]] = {}


def values_prepare(fields: tuple, values) -> list:
    """The values of these fields (a tuple kept for the process's life, e.g. a module
    constant) as the database takes them, as `update` and `create` prepare
    them; but a value of the type its field holds as is (a str of a CharField, an int of an
    IntegerField...) is passed on without the several calls preparing it takes, and a
    `JsonText` (a big task-app answer's trace) is written as the JSON text it holds, never
    decoded and encoded again."""
    return [
        value
        if type(value) in as_is
        else connection.ops.adapt_json_value(value, _TextAsIs)
        if isinstance(value, JsonText)
        else _json_prepare(field, value)
        if type(value) in _JSON_CONTAINERS
        else field.get_db_prep_save(value, connection)
        for field, as_is, value in zip(fields, _as_is(fields), values, strict=True)
    ]


_JSON_CONTAINERS = frozenset((dict, list))


def _json_prepare(field, value):
    """A dict or list of a JSON field without an encoder of its own, encoded by orjson as the
    database takes JSON text (`json.dumps` was a tenth of the interceptor's record writer's
    CPU); what orjson refuses (keys that are not strings, integers beyond 64 bits, lone
    surrogates) and any other field's value is prepared by the field, as `update` would. A
    NaN, which JSON has not, is written null (the field wrote `NaN`, which PostgreSQL
    refuses)."""
    if not isinstance(field, JSONField) or field.encoder is not None:
        return field.get_db_prep_save(value, connection)
    try:
        text = JsonText(orjson.dumps(value).decode())
    except TypeError:  # orjson.JSONEncodeError is one
        return field.get_db_prep_save(value, connection)
    return connection.ops.adapt_json_value(text, _TextAsIs)


# The types whose values these fields prepare into themselves (None included: every field
# prepares it into None).
_AS_IS = {
    "CharField": (str,), "TextField": (str,), "FloatField": (float,), "BooleanField": (bool,),
    **{kind: (int,) for kind in ("IntegerField", "PositiveIntegerField", "SmallIntegerField",
       "PositiveSmallIntegerField", "BigIntegerField", "PositiveBigIntegerField", "AutoField",
       "BigAutoField")},
}  # fmt: skip


def _as_is(fields: tuple) -> tuple[frozenset[type], ...]:
    """For each field, the types of values it takes as they are; kept by the identity of
    `fields` (the statements' tuples and the callers' constants live as long as the process):
    hashing the fields on each call cost as much as preparing their values."""
    kept = _as_is_kept.get(id(fields))
    if kept is None or kept[0] is not fields:
        targets = [f.target_field if f.is_relation else f for f in fields]
        kinds = tuple(
            frozenset((type(None), *_AS_IS.get(f.get_internal_type(), ()))) for f in targets
        )
        if len(_as_is_kept) > 1000:  # a caller made a tuple per call: bounded all the same
            _as_is_kept.clear()
        kept = _as_is_kept[id(fields)] = (fields, kinds)
    return kept[1]


_as_is_kept: dict[int, tuple[tuple, tuple[frozenset[type], ...]]] = {}


class _TextAsIs(json.JSONEncoder):
    """The encoder the backend's JSON adapter is given for a `JsonText`: its text as it is."""

    def encode(self, o):
        return o.text if isinstance(o, JsonText) else super().encode(o)
