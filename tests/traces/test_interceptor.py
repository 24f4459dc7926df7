"""The interceptor end to end: the real OpenAI SDK as the caller, evalhub's web process in
between, and the fake provider on a loopback port behind it."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.utils import timezone

from tests.support import servers
from tests.traces.conftest import SERVER_KEY
from traces.models import CallState, LLMCall

CALLER_KEY = "sk-caller-key-that-must-stay-here"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather in Paris today?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
# Published prices per million tokens (input, cached input, output), as the provider lists them.
GPT_4O_MINI = (0.15, 0.075, 0.60)
O4_MINI = (1.10, 0.275, 4.40)


def through(base: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{base}/api/interceptor/v1/{token}", api_key=CALLER_KEY, max_retries=0
    )


def direct(fake) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.url, api_key="sk-direct", max_retries=0)


def recorded(attempt, n: int = 1) -> list[LLMCall]:
    def ready():
        calls = list(LLMCall.objects.filter(attempt=attempt).order_by("seq"))
        done = len(calls) >= n and all(c.state == CallState.DONE for c in calls)
        return calls if done else None

    return servers.wait_until(ready, timeout=15, what=f"{n} recorded LLM call(s)")


def published_cost(prices, *, prompt, completion, cached=0) -> float:
    inp, cache, out = prices
    return ((prompt - cached) * inp + cached * cache + completion * out) / 1e6


def test_plain_call_answers_what_the_provider_answers_and_records_its_usage_and_price(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    fake = {"prompt_tokens": 2000, "completion_tokens": 150, "cached_tokens": 1500}

    got = through(interceptor_web, rollout.token).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": fake}
    )
    want = direct(fake_upstream).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": fake}
    )

    assert got.model_dump() == want.model_dump()
    (call,) = recorded(rollout.attempt)
    assert (call.prompt_tokens, call.completion_tokens, call.cached_tokens) == (2000, 150, 1500)
    assert call.total_tokens == 2150
    assert call.reasoning_tokens == 0
    assert not call.usage_estimated
    assert call.cost_usd == pytest.approx(
        published_cost(GPT_4O_MINI, prompt=2000, completion=150, cached=1500), rel=1e-9
    )
    assert not call.cost_unknown
    assert call.seq == 1
    assert call.http_status == 200 and call.error is None
    assert call.model_requested == call.model_answered == "gpt-4o-mini"
    assert call.request["messages"] == MESSAGES
    assert call.response["choices"][0]["message"]["content"] == got.choices[0].message.content
    assert call.latency_ms > 0 and call.ttft_ms > 0
    assert call.started_at <= timezone.now()


def test_reasoning_tokens_are_priced_once_inside_completion_tokens(interceptor_web, make_rollout):
    rollout = make_rollout()
    fake = {
        "prompt_tokens": 1000,
        "completion_tokens": 900,
        "reasoning_tokens": 700,
        "cached_tokens": 200,
        "answer_model": "o4-mini-2025-04-16",
    }
    through(interceptor_web, rollout.token).chat.completions.create(
        model="o4-mini", messages=MESSAGES, extra_body={"fake": fake}
    )
    (call,) = recorded(rollout.attempt)
    assert (call.completion_tokens, call.reasoning_tokens, call.cached_tokens) == (900, 700, 200)
    assert call.model_answered == "o4-mini-2025-04-16"
    assert call.cost_usd == pytest.approx(
        published_cost(O4_MINI, prompt=1000, completion=900, cached=200), rel=1e-9
    )


def test_the_callers_key_never_reaches_the_provider_and_the_servers_key_does(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True).close()
    client.models.list()

    assert len(fake_upstream.received) == 3
    for seen in fake_upstream.received:
        assert seen["headers"]["authorization"] == f"Bearer {SERVER_KEY}"
        assert CALLER_KEY not in repr(seen)
    recorded(rollout.attempt, 2)
    assert not LLMCall.objects.filter(request__icontains=CALLER_KEY).exists()


def test_other_providers_use_their_own_configured_key(interceptor_web, fake_upstream, make_rollout):
    rollout = make_rollout(provider="selfhosted")
    through(interceptor_web, rollout.token).chat.completions.create(
        model="free-model", messages=MESSAGES
    )
    assert fake_upstream.received[-1]["headers"]["authorization"] == "Bearer sk-selfhosted-secret"
    (call,) = recorded(rollout.attempt)
    assert call.provider == "selfhosted"
    # The operator priced this model at 0 on purpose: a real 0, not an unknown price.
    assert call.cost_usd == 0.0 and not call.cost_unknown


def test_a_stream_without_include_usage_is_relayed_as_is_and_still_records_usage(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    fake = {"prompt_tokens": 500, "completion_tokens": 40, "cached_tokens": 100}
    kwargs = {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True}

    got = [
        c.model_dump()
        for c in through(interceptor_web, rollout.token).chat.completions.create(
            **kwargs, extra_body={"fake": fake}
        )
    ]
    want = [
        c.model_dump()
        for c in direct(fake_upstream).chat.completions.create(**kwargs, extra_body={"fake": fake})
    ]

    assert got == want
    assert all(c["usage"] is None for c in got)
    forwarded = fake_upstream.received[0]["body"]
    assert forwarded["stream_options"] == {"include_usage": True}
    (call,) = recorded(rollout.attempt)
    assert call.stream
    assert (call.prompt_tokens, call.completion_tokens, call.cached_tokens) == (500, 40, 100)
    assert call.cost_usd == pytest.approx(
        published_cost(GPT_4O_MINI, prompt=500, completion=40, cached=100), rel=1e-9
    )
    content = "".join(c["choices"][0]["delta"]["content"] or "" for c in got if c["choices"])
    assert call.response["choices"][0]["message"]["content"] == content
    assert call.response["choices"][0]["finish_reason"] == "stop"
    assert "stream_options" not in call.request


def test_a_stream_with_include_usage_gets_the_providers_usage_chunk(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    kwargs = {
        "model": "gpt-4o-mini",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got = [
        c.model_dump()
        for c in through(interceptor_web, rollout.token).chat.completions.create(**kwargs)
    ]
    want = [c.model_dump() for c in direct(fake_upstream).chat.completions.create(**kwargs)]
    assert got == want
    assert got[-1]["choices"] == [] and got[-1]["usage"]["total_tokens"] == 1500
    (call,) = recorded(rollout.attempt)
    assert call.total_tokens == 1500


def test_the_raw_stream_bytes_reach_the_caller_untouched(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    body = {
        "model": "gpt-4o-mini",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = f"{interceptor_web}/api/interceptor/v1/{rollout.token}/chat/completions"
    got = httpx.post(url, json=body, timeout=10)
    want = httpx.post(f"{fake_upstream.url}/chat/completions", json=body, timeout=10)
    assert got.status_code == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.content == want.content


def test_a_tool_call_turn_passes_through_plain_and_streamed(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    kwargs = {"model": "gpt-4o-mini", "messages": MESSAGES, "tools": TOOLS, "tool_choice": "auto"}

    got = client.chat.completions.create(**kwargs)
    want = direct(fake_upstream).chat.completions.create(**kwargs)
    assert got.model_dump() == want.model_dump()
    assert got.choices[0].message.tool_calls[0].function.name == "get_weather"

    streamed = [c.model_dump() for c in client.chat.completions.create(**kwargs, stream=True)]
    streamed_direct = [
        c.model_dump() for c in direct(fake_upstream).chat.completions.create(**kwargs, stream=True)
    ]
    assert streamed == streamed_direct

    plain, stream = recorded(rollout.attempt, 2)
    assert plain.request["tools"] == TOOLS
    for call in (plain, stream):
        (tool_call,) = call.response["choices"][0]["message"]["tool_calls"]
        assert tool_call["id"] == "call_fake_1"
        assert tool_call["function"] == {
            "name": "get_weather",
            "arguments": '{"city": "Paris", "unit": "C"}',
        }
        assert call.response["choices"][0]["finish_reason"] == "tool_calls"
    assert stream.seq == 2


def test_logprobs_pass_through_and_are_recorded(interceptor_web, fake_upstream, make_rollout):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    kwargs = {"model": "gpt-4o-mini", "messages": MESSAGES, "logprobs": True, "top_logprobs": 2}

    got = client.chat.completions.create(**kwargs)
    want = direct(fake_upstream).chat.completions.create(**kwargs)
    assert got.model_dump() == want.model_dump()
    assert len(got.choices[0].logprobs.content[0].top_logprobs) == 2

    streamed = [c.model_dump() for c in client.chat.completions.create(**kwargs, stream=True)]
    streamed_direct = [
        c.model_dump() for c in direct(fake_upstream).chat.completions.create(**kwargs, stream=True)
    ]
    assert streamed == streamed_direct

    plain, stream = recorded(rollout.attempt, 2)
    assert plain.response["choices"][0]["logprobs"] == got.choices[0].logprobs.model_dump()
    assert stream.response["choices"][0]["logprobs"]["content"] == [
        c["choices"][0]["logprobs"]["content"][0]
        for c in streamed
        if c["choices"] and c["choices"][0]["logprobs"]
    ]


def test_response_format_n_and_unknown_fields_reach_the_provider_untouched(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    extra = {"my_vendor_flag": {"nested": [1, 2]}, "fake": {"completion_tokens": 10}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    got = through(interceptor_web, rollout.token).chat.completions.create(
        model="gpt-4o-mini",
        messages=MESSAGES,
        response_format=fmt,
        n=3,
        temperature=0.3,
        extra_body=extra,
    )
    sent = fake_upstream.received[0]["body"]
    assert sent == {
        "model": "gpt-4o-mini",
        "messages": MESSAGES,
        "response_format": fmt,
        "n": 3,
        "temperature": 0.3,
        **extra,
    }
    assert [c.index for c in got.choices] == [0, 1, 2]
    (call,) = recorded(rollout.attempt)
    assert call.request == sent
    assert len(call.response["choices"]) == 3


def test_a_model_without_a_known_price_has_null_cost_and_the_flag(interceptor_web, make_rollout):
    rollout = make_rollout()
    through(interceptor_web, rollout.token).chat.completions.create(
        model="some-finetune-nobody-prices", messages=MESSAGES
    )
    (call,) = recorded(rollout.attempt)
    assert call.total_tokens == 1500
    assert call.cost_usd is None
    assert call.cost_unknown


def test_an_operator_price_wins_for_its_model(interceptor_web, make_rollout):
    rollout = make_rollout()
    through(interceptor_web, rollout.token).chat.completions.create(
        model="house-model",
        messages=MESSAGES,
        extra_body={"fake": {"prompt_tokens": 1000, "cached_tokens": 400, "completion_tokens": 50}},
    )
    (call,) = recorded(rollout.attempt)
    assert call.cost_usd == pytest.approx((600 * 2.0 + 400 * 0.5 + 50 * 8.0) / 1e6, rel=1e-9)


def test_an_answer_without_usage_is_estimated_and_flagged(interceptor_web, make_rollout):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": {"no_usage": True}}
    )
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            stream=True,
            extra_body={"fake": {"no_usage": True}},
        )
    )
    assert chunks
    for call in recorded(rollout.attempt, 2):
        assert call.usage_estimated
        assert call.prompt_tokens > 0 and call.completion_tokens > 0
        assert call.total_tokens == call.prompt_tokens + call.completion_tokens
        assert call.cost_usd > 0
