"""Every wire format reads as one conversation: an Anthropic Messages call and an OpenAI
Responses call appear in the trace document and on the seed page as chat messages, tool calls,
tool results and reasoning, the way a chat completion does; a rollout's calls make one
transcript (the judge's) and one fine-tuning sample (the SFT export's)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from evalhub.fakeprovider import wire as fake_wire
from frontend.selectors import conversation_steps
from jobs.models import RolloutAttempt, SeedRun
from tests.support import fake_anthropic
from tests.support.trace_rows import make_traced_job
from tests.traces.test_documents import document_of, validate
from traces.calls import conversation
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


def chat(*pairs) -> list[tuple[str, dict, dict | None]]:
    return [("chat.completions", request, response) for request, response in pairs]


def answered(message: dict) -> dict:
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def test_the_transcript_keeps_each_message_once_with_tool_calls_and_results():
    system = {"role": "system", "content": "weather agent"}
    user = {"role": "user", "content": "Paris?"}
    call = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}  # fmt: skip
    echoed = {k: v for k, v in call.items() if k != "refusal"}  # clients drop fields they echo
    tool = {"role": "tool", "tool_call_id": "c1", "content": "18 degrees"}
    final = {"role": "assistant", "content": "It is 18 degrees."}
    calls = chat(
        ({"messages": [system, user]}, answered(call)),
        ({"messages": [system, user, echoed, tool]}, answered(final)),
    )
    assert conversation.transcript(calls) == [system, user, call, tool, final]
    assert conversation.sample(calls) == {"messages": [system, user, echoed, tool, final]}


def test_a_call_that_does_not_continue_the_history_starts_a_new_thread():
    a = {"role": "user", "content": "first"}
    b = {"role": "user", "content": "second"}
    calls = chat(({"messages": [a]}, None), ({"messages": [b]}, None))
    assert conversation.transcript(calls) == [a, b]
    assert [t.rewritten for t in conversation.turns(calls)] == [False, True]
    assert conversation.sample(calls) is None  # no answer to learn from


def test_messages_and_responses_calls_make_one_transcript(mixed_seed):
    _, seed_run = mixed_seed
    calls = LLMCall.objects.filter(attempt__seed_run=seed_run).order_by("seq")
    messages = conversation.transcript((c.route, c.request, c.response) for c in calls)
    roles = [m["role"] for m in messages]
    # The chat call, then the Messages call (a new thread) and the Responses one (another).
    assert roles == ["system", "user", "assistant",
                     "system", "user", "assistant", "tool", "assistant",
                     "system", "user", "assistant"]  # fmt: skip
    assert messages[6] == {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C, sunny"}
    assert messages[7]["reasoning_content"] == "It is sunny."
    assert messages[-1]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_sample_of_each_wire_format_is_chat_messages_then_the_answer():
    claude = conversation.sample(
        [("messages", CLAUDE_REQUEST, fake_anthropic.message(CLAUDE_REQUEST))]
    )
    assert [m["role"] for m in claude["messages"]] == [
        "system", "user", "assistant", "tool", "assistant"
    ]  # fmt: skip
    assert claude["messages"][0]["content"] == [{"type": "text", "text": "You check the weather."}]
    assert claude["messages"][-1] == {"role": "assistant", "content": "You said: ",
                                      "reasoning_content": "It is sunny."}  # fmt: skip
    assert claude["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": None, "parameters": {"type": "object"}}}]  # fmt: skip
    text = conversation.sample(
        [("completions", {"model": "m", "prompt": "2 + 2 ="},
          {"choices": [{"index": 0, "text": " 4", "finish_reason": "stop"}]})]
    )  # fmt: skip
    assert text == {"messages": [{"role": "user", "content": "2 + 2 ="},
                                 {"role": "assistant", "content": " 4"}]}  # fmt: skip


def test_a_responses_call_on_a_previous_response_continues_its_conversation():
    """With `previous_response_id` the provider keeps the history: the request sends only what
    is new, and the model saw the earlier response's conversation too."""
    tools = RESPONSES_REQUEST["tools"]
    first = {"model": "o4-mini", "instructions": "Be brief.", "input": "Weather in Lyon?",
             "tools": tools}  # fmt: skip
    first_answer = fake_wire.response(first) | {"id": "resp_1"}
    output = {"type": "function_call_output", "call_id": "call_fake_1", "output": "12 C"}
    second = {"model": "o4-mini", "instructions": "Be brief.", "previous_response_id": "resp_1",
              "input": [output], "tools": tools}  # fmt: skip
    calls = [("responses", first, first_answer),
             ("responses", second, fake_wire.response(second) | {"id": "resp_2"})]  # fmt: skip
    turns = conversation.turns(calls)
    assert not turns[1].rewritten
    assert [m["role"] for m in turns[1].new] == ["tool"]
    line = conversation.sample(calls)
    assert [m["role"] for m in line["messages"]] == ["system", "user", "assistant", "tool",
                                                     "assistant"]  # fmt: skip
    assert line["messages"][2]["tool_calls"][0]["id"] == "call_fake_1"
    assert line["messages"][-1]["content"] == "You said: 12 C"
    assert [m["role"] for m in conversation.transcript(calls)].count("system") == 1
