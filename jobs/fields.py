"""Reading request bodies safely: the JSON parser of the API and the serializer fields its
inputs use. Whatever a client sends, the answer is a 400 naming the field, never a 500: JSON is
parsed with a bound on nesting, numbers must fit the database, and JSON values must be storable
(PostgreSQL's jsonb refuses NUL characters and lone surrogates) and not deeper than
MAX_JSON_DEPTH, so every reader of a stored value (the trace documents, the zip) can handle it.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlparse

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# Deepest nesting accepted in a JSON value that is stored (policy, env_config, ...).
MAX_JSON_DEPTH = 64
INT64_MAX = 2**63 - 1


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, with a body nested beyond Python's recursion limit a 400."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


def json_value_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why `value` cannot be stored as it is, or None. Walks iteratively: no depth breaks it."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                return problem
        elif isinstance(item, dict | list):
            if depth > max_depth:
                return f"is nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key in item:
                    if problem := text_problem(str(key)):
                        return f"has a key that {problem.removeprefix('has ')}"
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            return f"has {item!r}, which JSON cannot hold"
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > INT64_MAX:
            return "has an integer beyond 64 bits"
    return None


def text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "has a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "has a lone surrogate (not valid Unicode)"
    return None


class StrictIntegerField(serializers.Field):
    """An integer in JSON: rejects booleans, floats and strings rather than coercing them, and
    anything a 64-bit column cannot hold."""

    def __init__(self, *, min_value: int | None = None, max_value: int = INT64_MAX, **kwargs):
        self.min_value, self.max_value = min_value, max_value
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(f"must be an integer, got {data!r}")
        if self.min_value is not None and data < self.min_value:
            raise serializers.ValidationError(f"must be at least {self.min_value}")
        if data > self.max_value:
            raise serializers.ValidationError(f"must be at most {self.max_value}")
        return data

    def to_representation(self, value: int) -> int:
        return value


class StrictNumberField(serializers.Field):
    def __init__(self, *, min_value: float, max_value: float, **kwargs):
        self.min_value, self.max_value = min_value, max_value
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            raise serializers.ValidationError(f"must be a number, got {data!r}")
        if not self.min_value <= data <= self.max_value:
            raise serializers.ValidationError(
                f"must be between {self.min_value} and {self.max_value}"
            )
        return float(data)

    def to_representation(self, value: float) -> float:
        return value


@extend_schema_field(OpenApiTypes.OBJECT)
class JsonObjectField(serializers.Field):
    """A JSON object that can be stored and read back (see json_value_problem)."""

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError(f"must be a JSON object, got {type(data).__name__}")
        if problem := json_value_problem(data):
            raise serializers.ValidationError(problem)
        return data

    def to_representation(self, value: dict) -> dict:
        return value


class TaskAppUrlField(serializers.CharField):
    """An http:// or https:// URL with a host; kept without its trailing slash."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data).strip()
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise serializers.ValidationError("must be an http:// or https:// URL with a host")
        return value.rstrip("/")


class SeedListField(serializers.JSONField):
    """The seeds of a job: a non-empty list of distinct 64-bit integers (validated by the
    serializer, which knows the configured maximum)."""
