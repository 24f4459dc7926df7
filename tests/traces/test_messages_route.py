"""Anthropic's Messages API through the interceptor: the real `anthropic` SDK as the caller
(ANTHROPIC_BASE_URL = the inference URL), evalhub's web process, and the fake Anthropic provider
behind it; tool use, thinking, prompt-caching usage, plain and streamed."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.support import fake_anthropic
from tests.traces.conftest import ANTHROPIC_SERVER_KEY
from tests.traces.test_interceptor import CALLER_KEY, recorded

# The SDK warns of the model's end of life; its prices are what is under test.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
MODEL = "claude-sonnet-4-5"
# Published prices per million tokens: input, cache write (5 min), cache read, output.
SONNET = (3.0, 3.75, 0.30, 15.0)
MESSAGES = [{"role": "user", "content": "What is the weather in Paris today?"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CACHING = {
    "input_tokens": 400,
    "cache_creation_input_tokens": 1000,
    "cache_read_input_tokens": 3000,
    "output_tokens": 120,
}


def claude(base: str, token: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"{base}/api/interceptor/v1/{token}", api_key=CALLER_KEY, max_retries=0
    )


def sonnet_cost(*, fresh, written, read, output) -> float:
    inp, write, cache, out = SONNET
    return (fresh * inp + written * write + read * cache + output * out) / 1e6


def assert_server_key_only(received: list[dict]) -> None:
    for request in received:
        headers = request["headers"]
        assert headers["x-api-key"] == ANTHROPIC_SERVER_KEY
        assert "authorization" not in headers
        assert CALLER_KEY not in str(headers) and CALLER_KEY not in str(request["body"])


def test_messages_create_with_tool_use_and_prompt_caching_is_billed_as_anthropic_bills(
    wire, make_rollout
):
    rollout = make_rollout(provider="claude")
    system = [{"type": "text", "text": "A long prompt.", "cache_control": {"type": "ephemeral"}}]

    message = claude(wire.base, rollout.token).messages.create(
        model=MODEL, max_tokens=512, system=system, messages=MESSAGES, tools=TOOLS,
        extra_body={"fake": CACHING},
    )  # fmt: skip

    assert message.stop_reason == "tool_use"
    assert message.content[-1].name == "get_weather"
    assert message.usage.cache_read_input_tokens == 3000
    (call,) = recorded(rollout.attempt)
    assert call.route == "messages" and call.provider == "claude" and call.http_status == 200
    assert (call.prompt_tokens, call.cached_tokens, call.cache_write_tokens) == (4400, 3000, 1000)
    assert (call.completion_tokens, call.total_tokens) == (120, 4520)
    assert call.cost_usd == pytest.approx(
        sonnet_cost(fresh=400, written=1000, read=3000, output=120)
    )
    assert call.response["content"][-1]["input"] == {"city": "Paris", "unit": "C"}
    # The caller's API version and beta flags are passed on; its key is not.
    assert wire.anthropic.received[0]["headers"]["anthropic-version"]
    assert_server_key_only(wire.anthropic.received)


def test_messages_stream_is_relayed_and_recorded_as_the_whole_message(wire, make_rollout):
    rollout = make_rollout(provider="claude")
    fake = {**CACHING, "thinking": "The user wants Paris weather."}

    with claude(wire.base, rollout.token).messages.stream(
        model=MODEL, max_tokens=512, messages=MESSAGES, extra_body={"fake": fake}
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    want = fake_anthropic.message({"model": MODEL, "messages": MESSAGES, "fake": fake})
    assert text == want["content"][-1]["text"]
    assert [block.model_dump(exclude_none=True) for block in final.content] == want["content"]
    assert final.usage.output_tokens == 120
    (call,) = recorded(rollout.attempt)
    assert call.stream and call.route == "messages"
    assert call.response["content"] == want["content"]
    assert call.response["stop_reason"] == "end_turn"
    assert (call.prompt_tokens, call.cached_tokens, call.cache_write_tokens) == (4400, 3000, 1000)
    assert call.completion_tokens == 120
    assert call.cost_usd == pytest.approx(
        sonnet_cost(fresh=400, written=1000, read=3000, output=120)
    )
    assert_server_key_only(wire.anthropic.received)


def test_the_openai_style_path_serves_messages_too(wire, make_rollout):
    rollout = make_rollout(provider="claude")
    resp = httpx.post(
        f"{wire.base}/api/interceptor/v1/{rollout.token}/messages",
        headers={"x-api-key": CALLER_KEY, "anthropic-version": "2023-06-01"},
        json={"model": MODEL, "max_tokens": 64, "messages": MESSAGES},
    )
    assert resp.status_code == 200 and resp.json()["type"] == "message"
    (call,) = recorded(rollout.attempt)
    assert call.prompt_tokens == 900 and call.completion_tokens == 250
    assert_server_key_only(wire.anthropic.received)


def test_messages_to_an_openai_provider_get_an_anthropic_style_error(wire, make_rollout):
    rollout = make_rollout(provider="openai")
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude(wire.base, rollout.token).messages.create(
            model=MODEL, max_tokens=64, messages=MESSAGES
        )
    assert caught.value.body["error"]["type"] == "unsupported_route"
    assert wire.anthropic.received == [] and wire.openai.received == []


def test_a_provider_error_reaches_the_caller_as_anthropic_sent_it(wire, make_rollout):
    rollout = make_rollout(provider="claude")
    fake = {"fail_times": 1, "fail_status": 400, "fail_key": rollout.token}
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude(wire.base, rollout.token).messages.create(
            model=MODEL, max_tokens=64, messages=MESSAGES, extra_body={"fake": fake}
        )
    assert caught.value.body["error"]["message"] == "fake: slow down"
    assert len(wire.anthropic.received) == 1, "a 400 is not tried again"
    (call,) = recorded(rollout.attempt)
    assert call.http_status == 400 and call.cost_usd == 0.0
