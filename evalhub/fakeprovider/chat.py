"""The fake provider's chat completions, plain and streamed: an arithmetic question answered
(right most of the time), a call of the request's first tool when it has tools, else the
request's last message said back; usage as the request's `fake` field steers it."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

# "What is 7 * 6?", "12 + 30 =", "what's 81 / 9": two numbers and an operator.
ARITHMETIC_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/×x])\s*(-?\d+(?:\.\d+)?)")
# One arithmetic question in this many is answered wrong (always the same ones): a job's scores
# are then not all 1, as with a real model.
WRONG_ONE_IN = 6


def arithmetic_answer(text: str) -> str | None:
    """ "a op b = c" for the first arithmetic question in `text`, or None. Deterministic: the
    same question gets the same answer; about one in WRONG_ONE_IN is off by one."""
    found = ARITHMETIC_RE.search(text)
    if found is None:
        return None
    a, op, b = float(found.group(1)), found.group(2), float(found.group(3))
    if op in "/" and b == 0:
        return f"{found.group(0)} is undefined"
    value = {"+": a + b, "-": a - b, "*": a * b, "×": a * b, "x": a * b, "/": a / b if b else 0}[op]
    digest = int(hashlib.sha256(found.group(0).encode()).hexdigest()[:8], 16)
    if digest % WRONG_ONE_IN == 0:
        value += 1
    shown = f"{value:.6g}" if value != int(value) else str(int(value))
    return f"{found.group(0)} = {shown}"


def answer_words(body: dict[str, Any]) -> list[str]:
    """The answer's text in words: an arithmetic question's answer, or the last message said
    back (its first eight words)."""
    messages = body.get("messages") or []
    last = messages[-1].get("content") if messages else ""
    if not isinstance(last, str):
        last = json.dumps(last)
    solved = arithmetic_answer(last)
    if solved is not None:
        first, *rest = solved.split(" ")
        return [first, *(f" {w}" for w in rest)]
    return ["You", " said:", *(f" {w}" for w in last.split()[:8])]


def completion_id(body: dict[str, Any]) -> str:
    # Not of stream_options: a stream must get the same id whether or not usage was asked for.
    keyed = {k: v for k, v in body.items() if k != "stream_options"}
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:24]
    return f"chatcmpl-{digest}"


def usage(body: dict[str, Any]) -> dict[str, Any] | None:
    opts = body.get("fake") or {}
    if opts.get("no_usage"):
        return None
    prompt = opts.get("prompt_tokens", 1200)
    completion_tokens = opts.get("completion_tokens", 300)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": opts.get("cached_tokens", 0), "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": opts.get("reasoning_tokens", 0),
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _logprobs(words: list[str], top: int) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": w,
                "logprob": -0.125 * (i + 1),
                "bytes": list(w.encode()),
                "top_logprobs": [
                    {"token": f"{w}#{k}", "logprob": -0.5 * (k + 1), "bytes": None}
                    for k in range(top)
                ],
            }
            for i, w in enumerate(words)
        ],
        "refusal": None,
    }


def _tool_call(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools") or []
    if not tools or body.get("tool_choice") == "none":
        return None
    opts = body.get("fake") or {}
    name = opts.get("tool_name") or tools[0].get("function", {}).get("name", "tool")
    arguments = opts.get("tool_arguments", {"city": "Paris", "unit": "C"})
    return {
        "id": "call_fake_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def answer_model(body: dict[str, Any]) -> str:
    return (body.get("fake") or {}).get("answer_model") or body.get("model") or "gpt-4o-mini"


def completion(body: dict[str, Any]) -> dict[str, Any]:
    words = answer_words(body)
    call = _tool_call(body)
    choices = []
    for index in range(body.get("n") or 1):
        message: dict[str, Any] = {"role": "assistant", "content": None if call else "".join(words)}
        message["refusal"] = None
        if (body.get("fake") or {}).get("reasoning"):
            message["reasoning_content"] = body["fake"]["reasoning"]
        if call:
            message["tool_calls"] = [call]
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": "tool_calls" if call else "stop",
            "logprobs": None,
        }
        if body.get("logprobs") and not call:
            choice["logprobs"] = _logprobs(words, body.get("top_logprobs") or 0)
        choices.append(choice)
    doc = {
        "id": completion_id(body),
        "object": "chat.completion",
        "created": 1700000000,
        "model": answer_model(body),
        "system_fingerprint": "fp_fake",
        "choices": choices,
    }
    doc["usage"] = usage(body)
    return doc


def stream_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed answer: per choice its role, reasoning, tool call (in two
    halves) or words, and its end; usage last when `stream_options.include_usage` asks."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {
        "id": completion_id(body),
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": answer_model(body),
        "system_fingerprint": "fp_fake",
    }
    chunks = []
    for index in range(body.get("n") or 1):
        for delta, finish, logprobs in _choice_deltas(body):
            choice = {"index": index, "delta": delta, "finish_reason": finish,
                      "logprobs": logprobs}  # fmt: skip
            chunks.append(
                {**base, "choices": [choice], **({"usage": None} if include_usage else {})}
            )
    reported = usage(body)
    if include_usage and reported:
        chunks.append({**base, "choices": [], "usage": reported})
    return chunks


def _choice_deltas(body: dict[str, Any]) -> list[tuple[dict[str, Any], str | None, Any]]:
    """(delta, finish_reason, logprobs) of each chunk of one choice."""
    words = answer_words(body)
    call = _tool_call(body)
    deltas: list[tuple[dict[str, Any], str | None, Any]] = [
        ({"role": "assistant", "content": "" if not call else None}, None, None)
    ]
    reasoning = (body.get("fake") or {}).get("reasoning")
    if reasoning:
        deltas.append(({"reasoning_content": reasoning}, None, None))
    if call:
        args = call["function"]["arguments"]
        half = len(args) // 2
        first = {"index": 0, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": args[:half]}}  # fmt: skip
        second = {"index": 0, "function": {"arguments": args[half:]}}
        deltas += [({"tool_calls": [first]}, None, None), ({"tool_calls": [second]}, None, None)]
    else:
        logprobs = _logprobs(words, body.get("top_logprobs") or 0)["content"]
        for i, word in enumerate(words):
            lp = {"content": [logprobs[i]], "refusal": None} if body.get("logprobs") else None
            deltas.append(({"content": word}, None, lp))
    deltas.append(({}, "tool_calls" if call else "stop", None))
    return deltas
