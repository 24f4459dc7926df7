"""The judge's prompt, its trimming budget, the answer parser, the reward formula and the
config's validation: plain functions, checked directly."""

from __future__ import annotations

import json
import math

import pytest

from jobs.verifier import prompt, rewards
from jobs.verifier.config import DEFAULT_RUBRIC, VerifierConfig, config_errors, verifier_config_of


def answer(content) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


def test_a_conversation_renders_with_its_tool_calls_and_results():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}  # fmt: skip
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Paris?"}]},
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "18 degrees"},
        {"role": "assistant", "content": "It is 18 degrees."},
    ]
    text = "\n".join(prompt.render(m) for m in messages)
    assert text.startswith("[user] Paris?\n[assistant]\n")  # text parts read as text
    assert '-> tool call get_weather({"city": "Paris"})' in text
    assert "[tool] 18 degrees" in text and "[assistant] It is 18 degrees." in text
    assert prompt.render({"role": "user", "content": [{"type": "image"}]}) == (
        '[user] [{"type": "image"}]'
    )


def test_trim_keeps_the_start_and_the_end_within_the_budget():
    text = "S" * 1000 + "M" * 5000 + "E" * 3000
    trimmed = prompt.trim(text, 4000)
    head, _, tail = trimmed.partition("\n[... 5000 characters trimmed ...]\n")
    assert head == "S" * 1000 and tail == "E" * 3000
    assert prompt.trim("short", 4000) == "short"


def test_judge_messages_hold_task_rubric_outcome_and_conversation():
    config = verifier_config_of({"enabled": True, "rubric": "Be exact.",
                                 "max_transcript_chars": 1000})  # fmt: skip
    conversation = [{"role": "user", "content": "Add 2 and 2"},
                    {"role": "assistant", "content": "x" * 5000 + " 4"}]  # fmt: skip
    outcome = {"task_app_score": 1.0, "details": {"task": "Arithmetic: add two numbers"}}
    system, user = prompt.judge_messages(config, conversation=conversation, outcome=outcome)
    assert system["content"] == prompt.SYSTEM_PROMPT
    content = user["content"]
    assert "## Task\nArithmetic: add two numbers" in content
    assert "## Rubric\nBe exact." in content
    assert '"task_app_score": 1.0' in content
    assert "characters trimmed" in content and content.endswith(" 4")
    request = prompt.judge_request(config, [system, user])
    assert request["response_format"]["json_schema"]["name"] == prompt.SCHEMA_NAME


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("8 out of 10", "not JSON"),
        ("[0.5]", "not a JSON object"),
        ('{"score": 1.5, "justification": "x"}', "score must be a number from 0 to 1"),
        ('{"score": true, "justification": "x"}', "score must be a number from 0 to 1"),
        ('{"score": 0.5}', "justification must be a string"),
        (None, "no text"),
    ],
)
def test_malformed_answers_say_what_is_wrong(content, reason):
    with pytest.raises(prompt.MalformedAnswer, match=reason):
        prompt.verdict_parse(answer(content))


def test_a_verdict_is_read_even_in_a_code_fence():
    fenced = "```json\n" + json.dumps({"score": 0, "justification": "wrong"}) + "\n```"
    assert prompt.verdict_parse(answer(fenced)) == prompt.Verdict(0.0, "wrong")


def test_reward_formula_of_each_source():
    verifier = VerifierConfig(reward_source="verifier")
    fused = VerifierConfig(reward_source="fused", weight_env=1, weight_event=1, weight_outcome=2)
    task_app = VerifierConfig(reward_source="task_app")
    assert rewards.reward(verifier, task_app_score=0.2, verifier_score=0.9) == 0.9
    assert rewards.reward(fused, task_app_score=0.2, verifier_score=0.9) == pytest.approx(
        (0.2 + 3 * 0.9) / 4
    )
    assert rewards.reward(task_app, task_app_score=0.2, verifier_score=0.9) == 0.2
    # A missing score is never a 0.
    assert rewards.reward(fused, task_app_score=0.2, verifier_score=None) is None
    assert rewards.reward(verifier, task_app_score=0.2, verifier_score=None) is None
    only_judge = VerifierConfig(reward_source="fused", weight_env=0, weight_outcome=1)
    assert rewards.reward(only_judge, task_app_score=None, verifier_score=0.4) == 0.4


@pytest.mark.parametrize(
    "weights",
    [
        {"weight_env": 1e308, "weight_event": 1e308, "weight_outcome": 1e308},
        {"weight_env": 1e308, "weight_event": 5e-324},
        {"weight_env": float("inf"), "weight_event": 1.0},
        {"weight_env": float("nan"), "weight_event": 1.0},
    ],
)
def test_the_fused_reward_is_never_nan_or_infinite(weights):
    config = VerifierConfig(reward_source="fused", **weights)
    for task_app_score, verifier_score in ((1.0, 0.5), (1.7e308, 1.7e308), (-1.7e308, 1.0)):
        value = rewards.reward(config, task_app_score=task_app_score, verifier_score=verifier_score)
        assert value is None or math.isfinite(value), (weights, task_app_score, value)
    huge = VerifierConfig(reward_source="fused", weight_env=1e308, weight_event=1e308)
    assert rewards.reward(huge, task_app_score=1.0, verifier_score=0.5) == pytest.approx(0.75)


def test_config_reads_synth_defaults_and_validates_ours():
    config = verifier_config_of({"enabled": True, "reward_source": " Fused "},
                                policy={"provider": "groq"})  # fmt: skip
    assert config.reward_source == "fused" and config.backend_provider == "groq"
    assert (config.concurrency, config.timeout, config.weight_env) == (8, 60.0, 1.0)
    assert config.rubric == DEFAULT_RUBRIC
    assert config_errors(
        {"concurrency": 0, "timeout": 0.5, "rubric": 3, "max_transcript_chars": 10}
    ) == [  # fmt: skip
        "concurrency must be an integer from 1 to 256",
        "timeout must be a number of seconds from 1 to 600",
        "rubric must be a string of at most 20000 characters",
        "max_transcript_chars must be an integer from 1000 to 400000",
    ]
    assert config_errors({"enabled": True, "reward_source": "fused", "weight_env": 0}) == [
        "reward_source 'fused' needs weights whose sum is above 0"
    ]
