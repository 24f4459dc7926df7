"""What a replay compares and tells again (traces.calls.replay, traces.calls.replay_streams):
the normalisation, the first difference and its report, and recorded answers as streams that
read back as the same document."""

from __future__ import annotations

import pytest

from evalhub.fakeprovider import chat as fake_chat
from evalhub.fakeprovider import wire as fake_wire
from tests.support import fake_anthropic
from traces.calls import replay
from traces.calls.replay_streams import recorded_stream
from traces.calls.usage import sse_events
from traces.calls.wire import response_from_stream
from traces.tokens import token_new

ASKED = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Seed 1: what is 2 + 1?"}],
    "temperature": 0,
}


def recorded(request: dict, route: str = "chat.completions", seq: int = 1) -> replay.Recorded:
    return replay.Recorded(
        seq=seq, route=route, request=replay.normalised(request), response={"id": f"r{seq}"},
        http_status=200, error=None, provider="openai", model_answered="gpt-4o-mini",
        usage=(10, 2, 0, 0, 0, 12, False), cost_usd=0.001,
    )  # fmt: skip


def test_key_order_tokens_and_fields_that_never_change_an_answer_are_not_compared():
    url = f"http://127.0.0.1:8000/api/interceptor/v1/{token_new()}"
    then = {**ASKED, "metadata": {"run": "a"}, "user": "x", "tools_url": url}
    now = {"tools_url": url.replace(url[-43:], token_new()[-43:]), "stream": True,
           "stream_options": {"include_usage": True}, "user": "y", **dict(reversed(ASKED.items()))}  # fmt: skip
    assert replay.normalised(then) == replay.normalised(now)
    assert replay.normalised({**ASKED, "temperature": 1}) != replay.normalised(ASKED)


def test_the_first_difference_is_named_by_its_json_path():
    now = {**ASKED, "messages": [*ASKED["messages"], {"role": "user", "content": "more"}]}
    assert replay.first_difference(ASKED, ASKED) is None
    assert replay.first_difference(ASKED, now) == ("$.messages[1]", "<absent>", now["messages"][1])
    changed = {**ASKED, "messages": [{"role": "user", "content": "Seed 1: what is 3 + 1?"}]}
    assert replay.first_difference(ASKED, changed)[0] == "$.messages[0].content"


def test_a_call_is_answered_by_its_own_number_else_by_the_same_request_else_it_diverges():
    second = {**ASKED, "temperature": 0.5}
    tape = replay.Tape(seed=4, repeat=1, calls=(recorded(ASKED), recorded(second, seq=2)))
    assert tape.match(1, "chat.completions", ASKED)[0].seq == 1
    assert tape.match(1, "chat.completions", second)[0].seq == 2  # parallel calls, any order
    assert tape.match(3, "chat.completions", second)[1]["path"] == "$"  # answered once
    missed, report = tape.match(2, "chat.completions", {**ASKED, "temperature": 0.7})
    assert missed is None
    assert (report["seed"], report["repeat"], report["call"], report["path"]) == (
        4, 1, 2, "$.temperature")  # fmt: skip
    assert (report["recorded"], report["now"]) == ("0.5", "0.7")
    assert report["message"] == (
        "replay diverged at call 2 of seed 4 repeat 1: $.temperature was 0.5, is now 0.7"
    )
    assert tape.match(3, "chat.completions", {"model": "x"})[1]["path"] == "$"
    assert tape.match(1, "responses", ASKED)[1]["path"] == "route"


def test_a_judge_call_is_matched_by_its_request_as_often_as_asked_and_its_report_shows_where():
    prompt = "## Task\nWhat is 2 + 1?\n\n## Rubric\nGrade it.\n\n" + "## Outcome\n" + "x" * 200
    first = {**ASKED, "messages": [{"role": "system", "content": "Judge."},
                                   {"role": "user", "content": prompt}]}  # fmt: skip
    retry = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "8/10"},
                                   {"role": "user", "content": "Answer again."}]}  # fmt: skip
    tape = replay.Tape(seed=2, repeat=0, calls=(recorded(first), recorded(retry, seq=2)))
    for _ in range(2):  # a judgement asked again (a lost lease) is answered again
        assert replay.judge_match(tape, "chat.completions", retry)[0].seq == 2
        assert replay.judge_match(tape, "chat.completions", first)[0].seq == 1
    harsher = prompt.replace("Grade it.", "Grade it. Be harsh.")
    asked = {**retry, "messages": [first["messages"][0], {"role": "user", "content": harsher},
                                   *retry["messages"][2:]]}  # fmt: skip
    missed, report = replay.judge_match(tape, "chat.completions", asked)
    assert missed is None and (report["call"], report["path"]) == (2, "$.messages[1].content")
    assert (
        report["recorded"].startswith("…") and "\\n## Rubric\\nGrade it.\\n" in report["recorded"]
    )
    assert "Grade it. Be harsh." in report["now"]
    assert report["message"].startswith("replay diverged at the judge's call 2 of seed 2 repeat 0")
    assert replay.judge_match(replay.Tape(2, 0, ()), "chat.completions", first)[1]["path"] == "$"


def test_reported_values_are_redacted_and_shortened(provider_key):
    secret = provider_key  # the server's provider key (tests/traces/conftest.py)
    replay.server_redactor.cache_clear()
    try:
        shown = replay.shown(f"my key is {secret} " + "x" * 500)
    finally:
        replay.server_redactor.cache_clear()
    assert secret not in shown and "<redacted>" in shown
    assert len(shown) == replay.SHOWN_CHARS and shown.endswith("…")


def said(choice: dict) -> dict:
    """What a choice says: its message's fields that have a value, its end, its logprobs."""
    message = choice.get("message") or {}
    return {
        "text": choice.get("text"),
        "message": {k: v for k, v in message.items() if v is not None},
        "finish_reason": choice.get("finish_reason"),
        "logprobs": choice.get("logprobs") and choice["logprobs"].get("content"),
    }


@pytest.mark.parametrize(
    ("route", "doc"),
    [
        ("chat.completions", fake_chat.completion({**ASKED, "logprobs": True, "top_logprobs": 2})),
        ("chat.completions", fake_chat.completion({**ASKED, "fake": {"reasoning": "think"},
                                                   "tools": [{"type": "function", "function": {
                                                       "name": "get_weather",
                                                       "parameters": {}}}]})),
        ("responses", fake_wire.response({"model": "gpt-4o-mini", "input": "Hi there"})),
        ("messages", fake_anthropic.message({"model": "claude-sonnet-4-5", "messages": [
            {"role": "user", "content": "Hi"}], "fake": {"thinking": "hmm"}})),
        ("completions", fake_wire.text_completion({"model": "gpt-3.5-turbo-instruct",
                                                   "prompt": "2 + 2 ="})),
    ],
    ids=["chat", "chat-tools", "responses", "messages", "completions"],
)  # fmt: skip
def test_a_recorded_answer_told_as_a_stream_reads_back_as_the_same_document(route, doc):
    told = recorded_stream(route, doc, include_usage=True)
    back = response_from_stream(route, sse_events(told))
    if route == "messages":
        assert back["content"] == doc["content"] and back["stop_reason"] == doc["stop_reason"]
        assert back["usage"] == doc["usage"]
    elif route == "responses":
        assert back == doc
    else:
        assert [said(c) for c in back["choices"]] == [said(c) for c in doc["choices"]]
        assert back["usage"] == doc["usage"]
    assert told.endswith(b"data: [DONE]\n\n") == (route in ("chat.completions", "completions"))
