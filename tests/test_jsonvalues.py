"""evalhub.jsonvalues reads what Python's json reads, as it reads it, orjson first."""

from __future__ import annotations

import json
import math

import pytest

from evalhub import jsonvalues

READ_AS_PYTHON_DOES = [
    b'{"reward": 1.5, "steps": [1, 2, {"ok": true}], "note": null}',
    b'{"reward": NaN, "worst": -Infinity}',  # orjson refuses these
    b'{"seed": 123456789012345678901234567890}',  # beyond 64 bits
    '{"text": "caf\u00e9"}'.encode("utf-16"),  # Python detects the encoding
    '{"text": "\u00e9l\u00e8ve"}',  # text as well as bytes
    '{"text": "\ud800"}',  # a lone surrogate in the text, which orjson refuses
    b'{"text": "\\ud800"}',  # and one escaped
]


@pytest.mark.parametrize("text", READ_AS_PYTHON_DOES)
def test_reads_what_python_reads_as_python_reads_it(text):
    got, expected = jsonvalues.loads(text), json.loads(text)
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert type(got) is type(expected)


def test_a_nan_stays_a_float_nan_for_the_callers_that_refuse_it():
    assert math.isnan(jsonvalues.loads(b'{"r": NaN}')["r"])


@pytest.mark.parametrize("text", [b"", b"{", b"not json", b'{"a": 1} trailing', b"\xff\xfe\x00"])
def test_what_python_refuses_raises_its_error(text):
    with pytest.raises(ValueError):
        jsonvalues.loads(text)


def test_nesting_deeper_than_python_reads_raises_a_recursion_error():
    with pytest.raises(RecursionError):
        jsonvalues.loads(b"[" * 100_000 + b"]" * 100_000)


def test_an_integer_beyond_64_bits_is_read_whole_not_as_a_float():
    """orjson reads 2**64 as 1.8446744073709552e19: such a number is read by Python's json."""
    for number in (2**64, -(2**63) - 1, 123456789012345678901234567890):
        got = jsonvalues.loads(f'{{"seed": {number}}}'.encode())["seed"]
        assert got == number and type(got) is int
        assert jsonvalues.loads(f"[{number}]") == [number]
