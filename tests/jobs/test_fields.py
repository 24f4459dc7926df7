"""What a stored JSON value may hold (`jobs.fields.json_value_problem`), wherever in the value
a problem sits: at the top, in a list, under a key, as a key, deep down, or in a subclass of a
JSON type (an enum's integer, an ordered dict)."""

from __future__ import annotations

import enum
from collections import OrderedDict

import pytest

from jobs.fields import INT64_MAX, json_value_problem


class Level(enum.IntEnum):
    HIGH = 2**70


class Text(str):
    pass


def nested(depth: int, leaf=1):
    value = leaf
    for _ in range(depth - 1):
        value = [value]
    return [value]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": [1, 2.5, "x", True, None, {"b": "é"}]}, None),
        ([INT64_MAX, -INT64_MAX, 1e308, -0.0], None),
        (float("nan"), "has nan, which JSON cannot hold"),
        ({"a": [1, float("inf")]}, "has inf, which JSON cannot hold"),
        ([{"a": {"b": -float("inf")}}], "has -inf, which JSON cannot hold"),
        ({"a": ["ok", "a\x00b"]}, "has a NUL character (\\u0000)"),
        ({"a\x00": 1}, "has a key that a NUL character (\\u0000)"),
        ({"\ud800": 1}, "has a key that a lone surrogate (not valid Unicode)"),
        ([["caf\udc00"]], "has a lone surrogate (not valid Unicode)"),
        ("\ud800", "has a lone surrogate (not valid Unicode)"),
        ({"n": INT64_MAX + 1}, "has an integer beyond 64 bits"),
        ([[-(2**63)]], "has an integer beyond 64 bits"),
        ({"level": Level.HIGH}, "has an integer beyond 64 bits"),
        ([Text("a\x00")], "has a NUL character (\\u0000)"),
        (OrderedDict(a=OrderedDict(b=float("nan"))), "has nan, which JSON cannot hold"),
        ({"a": (OrderedDict(b=1),)}, None),  # not a JSON type: nothing to say of it here
        (nested(64), None),
        (nested(65), "is nested deeper than 64 levels"),
        ({"a": nested(64)}, "is nested deeper than 64 levels"),
        (nested(64, leaf=float("nan")), "has nan, which JSON cannot hold"),
    ],
)
def test_a_problem_is_found_wherever_it_sits(value, problem):
    assert json_value_problem(value) == problem


def test_the_depth_is_the_callers_and_no_depth_breaks_the_walk():
    assert json_value_problem(nested(256), max_depth=256) is None
    assert json_value_problem(nested(257), max_depth=256) == "is nested deeper than 256 levels"
    assert json_value_problem(nested(100_000), max_depth=10**6) is None
