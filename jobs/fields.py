"""Reading request bodies safely: the JSON parser of the API and the serializer fields its
inputs use. Whatever a client sends, the answer is a 400 naming the field, never a 500: JSON is
parsed with a bound on nesting, numbers must fit the database, and JSON values must be storable
(PostgreSQL's jsonb refuses NUL characters and lone surrogates) and not deeper than
MAX_JSON_DEPTH, so every reader of a stored value (the trace documents, the zip) can handle it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from evalhub.secretkeys import REDACTED

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
    """Why `value` cannot be stored as it is, or None. Walks iteratively (no depth breaks it),
    pushing only containers: a value of the plain JSON types is checked where it is met (an
    ASCII string by a flag of its own, not a copy). Runs on every rollout's metrics and trace,
    megabytes for some task apps: twice as fast as pushing every value."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list or isinstance(item, dict | list):
            if depth > max_depth:
                return f"is nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key in item:
                    if problem := text_problem(key if type(key) is str else str(key)):
                        return f"has a key that {problem.removeprefix('has ')}"
                children = item.values()
            else:
                children = item
            for child in children:
                kind = type(child)
                if kind is str:
                    if "\x00" in child or not child.isascii():  # else nothing to check
                        if problem := text_problem(child):
                            return problem
                elif kind is dict or kind is list:
                    stack.append((child, depth + 1))
                elif kind is int:
                    if child > INT64_MAX or child < -INT64_MAX:
                        return "has an integer beyond 64 bits"
                elif kind is float:
                    if child - child != 0.0:  # NaN or an infinity
                        return f"has {child!r}, which JSON cannot hold"
                elif child is not None and kind is not bool:
                    stack.append((child, depth + 1))  # a subclass: the generic checks below
        elif problem := _scalar_problem(item):
            return problem
    return None


def _scalar_problem(item: Any) -> str | None:
    if isinstance(item, str):
        return text_problem(item)
    if isinstance(item, float) and not math.isfinite(item):
        return f"has {item!r}, which JSON cannot hold"
    if isinstance(item, int) and not isinstance(item, bool) and abs(item) > INT64_MAX:
        return "has an integer beyond 64 bits"
    return None


def text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "has a NUL character (\\u0000)"
    if text.isascii():  # no surrogate in it: a flag of the string's, not a scan
        return None
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
    """An http:// or https:// URL with a host and, if any, a port from 1 to 65535, as Python's
    HTTP clients read it, with neither a query nor a fragment; kept without its trailing slash.
    Credentials in it (`user:pass@`) are kept for the requests and never shown (`url_shown`)."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data).strip()
        rule = "must be an http:// or https:// URL with a host (and a port from 1 to 65535)"
        try:
            parsed = urlsplit(value)
            port = parsed.port  # a port out of range or not a number raises here
        except ValueError:
            raise serializers.ValidationError(rule) from None
        if parsed.scheme not in ("http", "https") or not parsed.hostname or port == 0:
            raise serializers.ValidationError(rule)
        if "?" in value or "#" in value:
            # The environment's routes (/rollout, /health, /mcp...) are added to the URL's end:
            # after a query they would be part of it, and shown with whatever key it held.
            raise serializers.ValidationError(
                "must not have a query (?...) or a fragment (#...): the environment's routes are "
                "added to its path; a key goes in task_app_api_key"
            )
        return value.rstrip("/")


def url_shown(url: str) -> str:
    """A URL as shown to people and written in messages: its credentials (`user:pass@`) and
    its query and fragment, where keys go (`?token=...`), are replaced. New jobs have neither
    a query nor a fragment (`TaskAppUrlField`); jobs stored before that rule may."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    path, query, fragment = _path_and_after(rest[len(netloc) :])
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    return f"{scheme}://{netloc}{path}{query and f'?{REDACTED}'}{fragment and f'#{REDACTED}'}"


def _path_and_after(rest: str) -> tuple[str, str, str]:
    """(path, query, fragment) of what follows a URL's host, without their "?" and "#"."""
    rest, _, fragment = rest.partition("#")
    path, _, query = rest.partition("?")
    return path, query, fragment


class SeedListField(serializers.JSONField):
    """The seeds of a job: a non-empty list of distinct 64-bit integers (validated by the
    serializer, which knows the configured maximum)."""


# At most this many unknown fields are named in an answer (and kept with the job).
MAX_WARNINGS = 20


def unknown_fields(
    given: Any, known: Iterable[str], *, where: str = "", near_misses_only: bool = False
) -> list[dict[str, str | None]]:
    """A warning per key of the object `given` that is not in `known`, naming the closest known
    one (difflib): such a field is not used, and a misspelt one would silently lose a setting
    (`max_cost_usd` misspelt is no budget at all). A request with one is still accepted: clients
    send fields of their own. With `near_misses_only`, only keys close to a known one are named
    (objects that also carry other programs' settings, such as `verifier_config`)."""
    if not isinstance(given, dict):
        return []
    known = list(known)
    warnings: list[dict[str, str | None]] = []
    for key in given:
        if key in known:
            continue
        close = difflib.get_close_matches(
            str(key), known, n=1, cutoff=0.75 if near_misses_only else 0.6
        )
        if near_misses_only and not close:
            continue
        name = f"{where}.{key}" if where else str(key)
        closest = f"{where}.{close[0]}" if where and close else (close[0] if close else None)
        hint = f"; did you mean {closest}?" if closest else ""
        warnings.append(
            {"field": name[:200], "closest": closest, "message": f"unknown field, not used{hint}"}
        )
    return warnings[:MAX_WARNINGS]
