import json

from traces.calls.usage import response_from_stream, sse_events, usage_estimate, usage_from_provider


def test_provider_usage_reads_cached_and_reasoning_details():
    usage = usage_from_provider(
        {
            "prompt_tokens": 100,
            "completion_tokens": 50,
            "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 60},
            "completion_tokens_details": {"reasoning_tokens": 30},
        }
    )
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 50, 150)
    assert (usage.cached_tokens, usage.reasoning_tokens) == (60, 30)
    assert not usage.estimated


def test_missing_usage_is_none_not_zero():
    assert usage_from_provider(None) is None
    assert usage_from_provider({}) is None


def test_an_estimate_counts_prompt_and_answer_characters_and_says_so():
    request = {"messages": [{"role": "user", "content": "x" * 400}]}
    response = {"choices": [{"message": {"content": "y" * 40}}]}
    usage = usage_estimate(request=request, response=response)
    assert usage.estimated
    assert usage.prompt_tokens == 100 + 4
    assert usage.completion_tokens == 10


def test_a_stream_is_assembled_into_one_answer_per_choice():
    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 1, "delta": {"content": "Other"}, "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "t1", "function": {"name": "f", "arguments": '{"a"'}}
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    ]
    raw = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    doc = response_from_stream(sse_events(raw))
    first, second = doc["choices"]
    assert first["message"]["content"] == "Hello"
    assert first["message"]["reasoning_content"] == "think"
    assert first["message"]["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert first["finish_reason"] == "tool_calls"
    assert second["message"]["content"] == "Other"
    assert doc["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}
    assert doc["model"] == "m" and doc["id"] == "c1"
