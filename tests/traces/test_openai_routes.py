"""OpenAI's other APIs through the interceptor, with the real `openai` SDK as the caller:
Responses (plain and streamed, function tools and reasoning), legacy text completions with
logprobs, embeddings; and model aliases."""

from __future__ import annotations

import pytest

from evalhub.fakeprovider import wire as fake_wire
from tests.traces.conftest import SERVER_KEY
from tests.traces.test_interceptor import (
    CALLER_KEY,
    GPT_4O_MINI,
    O4_MINI,
    published_cost,
    recorded,
    through,
)

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
USAGE = {"prompt_tokens": 2000, "cached_tokens": 500, "completion_tokens": 300,
         "reasoning_tokens": 200, "reasoning": "Paris: look it up."}  # fmt: skip


def assert_server_key_only(received: list[dict]) -> None:
    for request in received:
        assert request["headers"]["authorization"] == f"Bearer {SERVER_KEY}"
        assert CALLER_KEY not in str(request)


def test_responses_create_with_tools_and_reasoning(wire, make_rollout):
    rollout = make_rollout()
    response = through(wire.base, rollout.token).responses.create(
        model="o4-mini", input="What is the weather in Paris?", tools=TOOLS,
        reasoning={"effort": "low", "summary": "auto"}, extra_body={"fake": USAGE},
    )  # fmt: skip

    assert [item.type for item in response.output] == ["reasoning", "function_call"]
    assert response.output[-1].name == "get_weather"
    assert response.usage.output_tokens_details.reasoning_tokens == 200
    (call,) = recorded(rollout.attempt)
    assert call.route == "responses" and call.http_status == 200 and not call.stream
    assert (call.prompt_tokens, call.cached_tokens) == (2000, 500)
    assert (call.completion_tokens, call.reasoning_tokens, call.total_tokens) == (300, 200, 2300)
    assert call.cost_usd == pytest.approx(
        published_cost(O4_MINI, prompt=2000, completion=300, cached=500)
    )
    assert_server_key_only(wire.openai.received)


def test_responses_stream_is_relayed_and_recorded_as_the_completed_response(wire, make_rollout):
    rollout = make_rollout()
    fake = {**USAGE, "reasoning": None}
    body = {"model": "gpt-4o-mini", "input": "Say hello to Paris", "fake": fake}

    stream = through(wire.base, rollout.token).responses.create(
        model="gpt-4o-mini", input="Say hello to Paris", stream=True, extra_body={"fake": fake}
    )
    events = list(stream)

    assert events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == "You said: Say hello to Paris"
    (call,) = recorded(rollout.attempt)
    assert call.stream and call.route == "responses"
    assert call.response["output"] == fake_wire.response(body)["output"]
    assert (call.prompt_tokens, call.cached_tokens, call.completion_tokens) == (2000, 500, 300)
    assert call.cost_usd == pytest.approx(
        published_cost(GPT_4O_MINI, prompt=2000, completion=300, cached=500)
    )
    assert_server_key_only(wire.openai.received)


@pytest.mark.parametrize("stream", [False, True])
def test_text_completions_with_logprobs(wire, make_rollout, stream):
    rollout = make_rollout()
    client = through(wire.base, rollout.token)
    fake = {"prompt_tokens": 40, "completion_tokens": 6}
    kwargs = dict(model="gpt-3.5-turbo-instruct", prompt="The capital of France", logprobs=2,
                  extra_body={"fake": fake})  # fmt: skip
    if stream:
        chunks = list(client.completions.create(stream=True, **kwargs))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert all(c.usage is None for c in chunks), "the usage asked for is kept from the caller"
    else:
        text = client.completions.create(**kwargs).choices[0].text

    assert text == "You said: The capital of France"
    (call,) = recorded(rollout.attempt)
    assert call.route == "completions" and call.stream == stream
    choice = call.response["choices"][0]
    assert choice["text"] == text and choice["logprobs"]["tokens"][0] == "You"
    assert len(choice["logprobs"]["top_logprobs"][0]) == 2
    assert (call.prompt_tokens, call.completion_tokens) == (40, 6)
    assert call.cost_usd == pytest.approx((40 * 1.5 + 6 * 2.0) / 1e6)


def test_embeddings(wire, make_rollout):
    rollout = make_rollout()
    result = through(wire.base, rollout.token).embeddings.create(
        model="text-embedding-3-small", input=["Paris", "Lyon"], encoding_format="float"
    )
    assert [len(d.embedding) for d in result.data] == [3, 3]
    (call,) = recorded(rollout.attempt)
    assert call.route == "embeddings" and (call.prompt_tokens, call.total_tokens) == (16, 16)
    assert call.cost_usd == pytest.approx(16 * 0.02 / 1e6)
    assert_server_key_only(wire.openai.received)


def test_a_model_alias_goes_to_its_provider_and_model(wire, make_rollout):
    rollout = make_rollout()
    answer = through(wire.base, rollout.token).chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.model == "gpt-4o-mini"
    assert wire.openai.received[-1]["body"]["model"] == "gpt-4o-mini"
    (call,) = recorded(rollout.attempt)
    assert call.provider == "fast-openai" and call.model_requested == "gpt-4o-mini"
    assert call.cost_usd == pytest.approx(published_cost(GPT_4O_MINI, prompt=1200, completion=300))
