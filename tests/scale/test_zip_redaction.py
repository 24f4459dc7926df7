"""The zip's redaction skips the parts of a document with nothing to redact: what it makes must
equal the full walk's, whatever hides where (traces.zip.members._redacted against Redactor.value)."""

from __future__ import annotations

import json

import orjson
import pytest

from traces.redaction import JsonScrubber, Redactor
from traces.tokens import token_new

SECRET = "sk-provider-secret-0a9b8c7d6e5f"
TOKEN = token_new()
LOGPROBS = [{"token": f"t{i}", "logprob": -0.1 * i, "bytes": [116, 48 + i % 10]} for i in range(50)]

DOCUMENTS = [
    {"clean": {"logprobs": LOGPROBS, "n": 1, "f": 0.5, "none": None, "flag": True}},
    {"deep": [[[[[[[[[[{"Authorization": "Bearer abcdefghijkl"}]]]]]]]]]]},
    {"headers": {"X-Api-Key": "whatever-value", "api_key": None, "apiKey": "", "Cookie": "c=1"}},
    {"text": f"call {SECRET} now", "list": ["x", f"https://h/api/interceptor/v1/{TOKEN}/chat"]},
    {"token": TOKEN, "bearer": "Authorization: bearer abcdef123456", "BEARER": "BEARER abc123456"},
    {"nested": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"password": "p"}}}}}}}}}}},
    {f"key {SECRET}": "value", "K": "\u212a", "api_\u212aey": "kelvin-named key value"},
    {"escaped": f'quote " and \\ and \n {SECRET}', "tuple": ("a", TOKEN), 7: "int key"},
    {"mixed": [LOGPROBS, {"client-secret": "s3cr3t-value"}, "ok", 1, None]},
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_selective_redaction_equals_the_full_walk(document):
    redactor = Redactor([SECRET, "task-app-key-7c1f0e9a2b4d"])
    assert JsonScrubber(redactor).value(document) == redactor.value(document)


def test_a_clean_part_is_returned_as_it_is():
    redactor = Redactor([SECRET])
    clean = {"logprobs": LOGPROBS}
    assert JsonScrubber(redactor).value(clean) is clean


@pytest.mark.parametrize("document", DOCUMENTS)
def test_json_text_is_cleared_only_when_nothing_in_it_would_change(document):
    """The zip keeps a provider's or task app's JSON unwalked when its stored text is cleared:
    whichever way the text was written (json as Django stores it, unescaped, orjson)."""
    redactor = Redactor([SECRET, "task-app-key-7c1f0e9a2b4d"])
    scrubber = JsonScrubber(redactor)
    texts = [
        json.dumps(document),
        json.dumps(document, ensure_ascii=False),
        orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode(),
    ]
    changes = redactor.value(document) != document
    assert [scrubber.may_change(text) for text in texts] == [changes] * 3


def test_a_bearer_in_capitals_is_masked():
    assert Redactor().text("BEARER abc123456 and BeArEr zyx987654") == (
        "BEARER <redacted> and BeArEr <redacted>"
    )
