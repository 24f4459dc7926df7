"""The fake OpenAI provider's other routes: Responses (`/v1/responses`, plain and streamed,
function calls and reasoning items), legacy text completions (`/v1/completions`, with
`logprobs`) and embeddings (`/v1/embeddings`). Deterministic like chat.py, and steered by
the same `"fake": {...}` body field (prompt_tokens, completion_tokens, cached_tokens,
reasoning_tokens, reasoning: "...", answer_model)."""

from __future__ import annotations

import json
from typing import Any

from evalhub.fakeprovider.chat import answer_model, answer_words, usage


def _text_of(body: dict[str, Any]) -> str:
    for key in ("input", "prompt"):
        value = body.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            last = value[-1]
            if isinstance(last, dict):
                content = last.get("content") or last.get("output") or ""
                return content if isinstance(content, str) else json.dumps(content)
            return str(last)
    return ""


def _said(body: dict[str, Any]) -> list[str]:
    return answer_words({"messages": [{"content": _text_of(body)}]})


# --- Responses ---------------------------------------------------------------------------------


def response_usage(body: dict[str, Any]) -> dict[str, Any]:
    reported = usage(body) or {}
    prompt, out = reported.get("prompt_tokens", 0), reported.get("completion_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": reported["prompt_tokens_details"]["cached_tokens"]
        },
        "output_tokens": out,
        "output_tokens_details": {
            "reasoning_tokens": reported["completion_tokens_details"]["reasoning_tokens"]
        },
        "total_tokens": prompt + out,
    }


def response_output(body: dict[str, Any]) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    reasoning = (body.get("fake") or {}).get("reasoning")
    if reasoning:
        summary = [{"type": "summary_text", "text": reasoning}]
        output.append({"type": "reasoning", "id": "rs_fake_1", "summary": summary})
    tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    # A tool's result given back (function_call_output) gets a final answer, not a new call.
    answered = any(
        isinstance(i, dict) and i.get("type") == "function_call_output"
        for i in body.get("input") or []
        if not isinstance(body.get("input"), str)
    )
    if tools and not answered and body.get("tool_choice") != "none":
        output.append(
            {
                "type": "function_call",
                "id": "fc_fake_1",
                "call_id": "call_fake_1",
                "name": tools[0]["name"],
                "arguments": json.dumps({"city": "Paris", "unit": "C"}),
                "status": "completed",
            }
        )
        return output
    text = {"type": "output_text", "text": "".join(_said(body)), "annotations": []}
    output.append(
        {
            "type": "message",
            "id": "msg_fake_1",
            "status": "completed",
            "role": "assistant",
            "content": [text],
        }  # fmt: skip
    )
    return output


def response(body: dict[str, Any], *, status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_fake_1",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": answer_model(body),
        "output": response_output(body) if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "usage": response_usage(body) if status == "completed" else None,
    }


def response_events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    final = response(body)
    events = [("response.created", {"response": response(body, status="in_progress")})]
    for index, item in enumerate(final["output"]):
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
        if item["type"] == "message":
            for word in _said(body):
                events.append(
                    (
                        "response.output_text.delta",
                        {
                            "item_id": item["id"],
                            "output_index": index,
                            "content_index": 0,
                            "delta": word,
                        },
                    )  # fmt: skip
                )
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": final}))
    return [(kind, {"type": kind, "sequence_number": i, **data}) for i, (kind, data) in
            enumerate(events)]  # fmt: skip


# --- Legacy completions and embeddings ---------------------------------------------------------


def _text_logprobs(words: list[str], top: int) -> dict[str, Any]:
    offsets, at = [], 0
    for word in words:
        offsets.append(at)
        at += len(word)
    return {
        "tokens": words,
        "token_logprobs": [-0.125 * (i + 1) for i in range(len(words))],
        "top_logprobs": [{f"{w}#{k}": -0.5 * (k + 1) for k in range(top)} for w in words],
        "text_offset": offsets,
    }


def text_completion(body: dict[str, Any]) -> dict[str, Any]:
    words = _said(body)
    logprobs = body.get("logprobs")
    choice = {
        "index": 0,
        "text": "".join(words),
        "logprobs": _text_logprobs(words, logprobs) if logprobs is not None else None,
        "finish_reason": "stop",
    }
    return {"id": "cmpl-fake-1", "object": "text_completion", "created": 1700000000,
            "model": answer_model(body), "choices": [choice], "usage": usage(body)}  # fmt: skip


def text_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    words = _said(body)
    logprobs = body.get("logprobs")
    base = {"id": "cmpl-fake-1", "object": "text_completion", "created": 1700000000,
            "model": answer_model(body)}  # fmt: skip
    chunks = []
    for i, word in enumerate(words):
        lp = _text_logprobs(words, logprobs) if logprobs is not None else None
        if lp is not None:
            lp = {k: v[i : i + 1] for k, v in lp.items()}
        last = i == len(words) - 1
        choice = {
            "index": 0,
            "text": word,
            "logprobs": lp,
            "finish_reason": "stop" if last else None,
        }
        chunks.append({**base, "choices": [choice]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": usage(body)})
    return chunks


def embeddings(body: dict[str, Any]) -> dict[str, Any]:
    inputs = body.get("input")
    inputs = inputs if isinstance(inputs, list) else [inputs]
    prompt = (body.get("fake") or {}).get("prompt_tokens", 8 * len(inputs))
    data = [
        {"object": "embedding", "index": i, "embedding": [0.125 * (i + 1), -0.25, 0.5]}
        for i in range(len(inputs))
    ]
    return {"object": "list", "data": data, "model": answer_model(body),
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}  # fmt: skip
