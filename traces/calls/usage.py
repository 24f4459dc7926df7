"""Reading what an upstream answered: the response document and its token usage.

A streamed answer is rebuilt from its server-sent events into the shape of a non-streamed one
(content, tool calls, reasoning content, finish reason, logprobs per choice), so every recorded
call reads the same. All of this runs off the hot path, after the caller has its answer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from evalhub import jsonvalues

# No tokenizer works offline here (tiktoken downloads its vocabularies at first use), so an
# answer without usage is estimated at ~4 characters per token, as OpenAI's own rule of thumb.
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4


@dataclass
class TokenUsage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False


def usage_from_provider(usage: Any) -> TokenUsage | None:
    """TokenUsage from an OpenAI-style `usage` object; None when there is none."""
    if not isinstance(usage, dict):
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    if prompt is None and completion is None:
        return None
    prompt, completion = prompt or 0, completion or 0
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    total = _int(usage.get("total_tokens"))
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=_int(prompt_details.get("cached_tokens")) or 0,
        reasoning_tokens=_int(completion_details.get("reasoning_tokens")) or 0,
        total_tokens=total if total is not None else prompt + completion,
    )


def usage_estimate(*, request: dict[str, Any], response: dict[str, Any] | None) -> TokenUsage:
    """A character-count estimate for a provider that reported no usage."""
    prompt_chars = 0
    messages = request.get("messages") or []
    for message in messages:
        prompt_chars += _text_len(message)
    for key in ("input", "prompt", "system", "instructions"):  # the other wire formats
        if request.get(key):
            prompt_chars += len(json.dumps(request[key]))
    if request.get("tools"):
        prompt_chars += len(json.dumps(request["tools"]))
    prompt = _tokens(prompt_chars) + TOKENS_PER_MESSAGE * len(messages)
    completion_chars = 0
    for choice in (response or {}).get("choices") or []:
        completion_chars += _text_len(choice.get("message") or {}) + len(choice.get("text") or "")
    for key in ("output", "content"):  # Responses' output items, Messages' content blocks
        if isinstance((response or {}).get(key), list):
            completion_chars += len(json.dumps(response[key]))
    completion = _tokens(completion_chars)
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        estimated=True,
    )


def sse_events(raw: bytes) -> list[Any]:
    """The JSON payloads of a server-sent-event stream (`data: ...` lines), `[DONE]` left out."""
    events = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue
        try:
            events.append(jsonvalues.loads(data))
        except (ValueError, RecursionError):
            continue
    return events


def response_from_stream(events: list[Any]) -> dict[str, Any]:
    """One chat.completion document assembled from the chunks of a stream."""
    doc: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        for key in ("id", "model", "created", "system_fingerprint", "service_tier"):
            if event.get(key) is not None:
                doc[key] = event[key]
        if event.get("usage"):
            doc["usage"] = event["usage"]
        if event.get("error"):
            doc["error"] = event["error"]
        for chunk in event.get("choices") or []:
            _merge_choice(choices, chunk)
    doc["choices"] = [choices[i] for i in sorted(choices)]
    return doc


def _merge_choice(choices: dict[int, dict[str, Any]], chunk: dict[str, Any]) -> None:
    index = chunk.get("index", 0)
    choice = choices.setdefault(
        index, {"index": index, "message": {"role": "assistant"}, "finish_reason": None}
    )
    message = choice["message"]
    delta = chunk.get("delta") or {}
    if delta.get("role"):
        message["role"] = delta["role"]
    for key in ("content", "reasoning_content", "reasoning", "refusal"):
        if isinstance(delta.get(key), str):
            message[key] = message.get(key, "") + delta[key]
    for call in delta.get("tool_calls") or []:
        calls = message.setdefault("tool_calls", [])
        i = call.get("index", len(calls))
        while len(calls) <= i:
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        target = calls[i]
        if call.get("id"):
            target["id"] = call["id"]
        if call.get("type"):
            target["type"] = call["type"]
        function = call.get("function") or {}
        if function.get("name"):
            target["function"]["name"] += function["name"]
        if function.get("arguments"):
            target["function"]["arguments"] += function["arguments"]
    if chunk.get("finish_reason"):
        choice["finish_reason"] = chunk["finish_reason"]
    logprobs = chunk.get("logprobs")
    if isinstance(logprobs, dict):
        merged = choice.setdefault("logprobs", {"content": []})
        merged["content"].extend(logprobs.get("content") or [])


def _text_len(message: dict[str, Any]) -> int:
    content = message.get("content")
    n = 0
    if isinstance(content, str):
        n += len(content)
    elif isinstance(content, list):
        n += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        n += len(function.get("name") or "") + len(function.get("arguments") or "")
    return n


def _tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
