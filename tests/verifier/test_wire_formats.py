"""A policy that speaks OpenAI's Responses API or Anthropic's Messages API (through their own
SDKs, the final call of each rollout streamed) has its conversation read as chat everywhere it
is rebuilt: the judge is shown it, and the SFT export holds it, as it does a chat completion's.
Real workers, evalhub's interceptor, the fake providers behind it."""

from __future__ import annotations

import json

import pytest

from tests.support.servers import serve_asgi
from tests.support.task_app import AGENT_SYSTEM, task_app_create, weather_of
from tests.verifier.test_judge import job_run, judge_calls

pytestmark = [
    pytest.mark.worker,
    # The SDK warns of the model's end of life; the conversation is what is under test.
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]
POLICIES = {
    "responses": {"model": "gpt-4o-mini", "provider": "openai"},
    "messages": {"model": "claude-sonnet-4-5", "provider": "claude"},
}
WEATHER = weather_of({"city": "Paris", "unit": "C"})  # the tool's result in every rollout
# The fake providers' final answers: Responses repeats the tool's result, Messages the (empty)
# text of the message that carries it.
ANSWERS = {"responses": f"You said: {WEATHER}", "messages": "You said: "}


@pytest.mark.parametrize("wire", ["responses", "messages"])
def test_the_judge_and_the_sft_export_read_the_conversation_of_any_wire_format(stack, wire):
    app, state = task_app_create()
    verifier = {"enabled": True, "reward_source": "task_app", "backend_provider": "openai",
                "backend_model": "gpt-4o-mini"}  # fmt: skip
    with serve_asgi(app) as url:
        stack.worker()
        job, results = job_run(
            stack, url, verifier, seeds=[0, 1], policy=POLICIES[wire],
            env_config={"call_llm": wire},
        )  # fmt: skip
    assert job.status == "completed", job.error
    assert len(state.llm_answers) == 4  # two calls per rollout, every one answered
    assert all(row["num_llm_calls"] == 2 for row in results["results"])

    exported = stack.get(f"/api/eval/jobs/{job.id}/export/sft.jsonl")
    assert exported.status_code == 200, exported.text
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [(line["seed"], line["repeat"]) for line in lines] == [(0, 0), (1, 0)]
    for line in lines:
        # The policy's last call as the model saw it, then its answer; not the judge's call.
        messages = line["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool",
                                                 "assistant"]  # fmt: skip
        assert messages[0]["content"] == AGENT_SYSTEM
        assert f"Seed {line['seed']}: what is the weather" in json.dumps(messages[1])
        (call,) = messages[2]["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "unit": "C"}
        assert messages[3] == {"role": "tool", "tool_call_id": call["id"], "content": WEATHER}
        assert messages[4]["content"] == ANSWERS[wire]
        assert line["tools"][0]["function"]["name"] == "get_weather"
        assert line["score"] == pytest.approx(results["results"][line["seed"]]["score"])

    for seed, (judged,) in judge_calls(job).items():
        shown = judged.request["messages"][1]["content"]
        conversation = shown.partition("## The agent's conversation\n")[2]
        assert conversation.startswith(f"[system] {AGENT_SYSTEM}\n[user] Seed {seed}: what is")
        assert '-> tool call get_weather({"city": "Paris", "unit": "C"})' in conversation
        assert f"[tool] {WEATHER}\n[assistant] {ANSWERS[wire]}".rstrip() in conversation
        assert conversation.count("[system]") == 1  # each message once
