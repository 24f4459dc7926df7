"""Every wire format reads as one conversation: an Anthropic Messages call and an OpenAI
Responses call appear in the trace document and on the seed page as chat messages, tool calls,
tool results and reasoning, the way a chat completion does."""

from __future__ import annotations

import pytest
from django.utils import timezone

from frontend.selectors import conversation_steps
from jobs.models import RolloutAttempt, SeedRun
from tests.support import fake_anthropic, fake_wire
from tests.support.trace_rows import make_traced_job
from tests.traces.test_documents import document_of, validate
from traces.models import LLMCall
from traces.redaction import job_redactor

pytestmark = pytest.mark.django_db

CLAUDE_REQUEST = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 256,
    "system": [{"type": "text", "text": "You check the weather."}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Ask the tool.", "signature": "s"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C, sunny"},
        ]},
    ],
    "fake": {"thinking": "It is sunny."},
}  # fmt: skip
RESPONSES_REQUEST = {
    "model": "o4-mini",
    "instructions": "You check the weather.",
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Lyon?"}]},
    ],
    "fake": {"reasoning": "Use the tool."},
}


def add_call(attempt: RolloutAttempt, seq: int, route: str, request: dict, response: dict):
    LLMCall.objects.create(attempt=attempt, seq=seq, route=route, request=request,
                           response=response, http_status=200, started_at=timezone.now())  # fmt: skip


@pytest.fixture
def mixed_seed():
    traced = make_traced_job(seeds=[4], calls_per_seed=1)
    seed_run = SeedRun.objects.get(job=traced.job, seed=4)
    attempt = seed_run.rollout_attempts.get()
    add_call(attempt, 2, "messages", CLAUDE_REQUEST, fake_anthropic.message(CLAUDE_REQUEST))
    add_call(attempt, 3, "responses", RESPONSES_REQUEST, fake_wire.response(RESPONSES_REQUEST))
    return traced, seed_run


def test_messages_and_responses_calls_read_as_chat_in_the_trace_document(mixed_seed, trace_schema):
    traced, _ = mixed_seed
    document = document_of(traced, 4)
    validate(document, trace_schema)
    claude, responses = document["llm_calls"][1:]

    assert (claude["route"], responses["route"]) == ("messages", "responses")
    roles = [m["role"] for m in claude["request"]["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assistant, result = claude["request"]["messages"][2:]
    assert assistant["reasoning_content"] == "Ask the tool."
    assert assistant["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city": "Paris"}'
    }  # fmt: skip
    assert (result["tool_call_id"], result["content"]) == ("toolu_1", "18 C, sunny")
    assert claude["request"]["tools"][0]["function"]["name"] == "get_weather"
    assert claude["request"]["params"]["max_tokens"] == 256
    assert claude["response"]["reasoning"] == "It is sunny."
    assert claude["response"]["message"]["content"] == "You said: "
    assert claude["response"]["finish_reason"] == "stop"

    assert [m["role"] for m in responses["request"]["messages"]] == ["system", "user"]
    assert responses["request"]["messages"][1]["content"][0]["text"] == "Weather in Lyon?"
    assert responses["response"]["reasoning"] == "Use the tool."
    assert responses["response"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert responses["response"]["finish_reason"] == "tool_calls"


def test_the_seed_page_shows_them_as_one_conversation(mixed_seed):
    traced, seed_run = mixed_seed
    calls = list(LLMCall.objects.filter(attempt__seed_run=seed_run).order_by("seq"))
    steps = conversation_steps(calls=calls, redactor=job_redactor(job=traced.job))

    claude, responses = steps[1:]
    tool = [m for m in claude.new_messages if m.role == "tool"][0]
    assert (tool.name, tool.text) == ("get_weather", "18 C, sunny")
    assert claude.answer[0].reasoning == "It is sunny."
    assert responses.answer[0].tool_calls[0].name == "get_weather"
    assert responses.answer[0].reasoning == "Use the tool."
