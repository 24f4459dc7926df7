"""The wire formats besides chat completions: their usage and their streams.

- OpenAI Responses (`responses`): usage `input_tokens` (with `input_tokens_details.cached_tokens`
  among them), `output_tokens` (with `output_tokens_details.reasoning_tokens`); a stream ends in
  `response.completed` (or `.incomplete`/`.failed`) carrying the whole response and its usage.
- Anthropic Messages (`messages`): usage `input_tokens` (the uncached rest),
  `cache_creation_input_tokens`, `cache_read_input_tokens`, `output_tokens`; a stream's
  `message_start` carries the input usage and `message_delta` the output so far.
- Legacy text completions (`completions`): chat's usage; choices with `text` and `logprobs`.
- Embeddings (`embeddings`): usage `prompt_tokens` only.

Every usage becomes a TokenUsage whose prompt_tokens counts every input token (cached ones and
cache writes among them) and completion_tokens every output token (reasoning among them).
"""

from __future__ import annotations

import json
from typing import Any

from traces.calls.usage import TokenUsage, usage_from_provider
from traces.calls.usage import response_from_stream as chat_from_stream


def usage_of(route: str, usage: Any) -> TokenUsage | None:
    if not isinstance(usage, dict):
        return None
    if route == "messages":
        return _anthropic_usage(usage)
    if route == "responses" or ("input_tokens" in usage and "prompt_tokens" not in usage):
        return _responses_usage(usage)
    return usage_from_provider(usage)


def _anthropic_usage(usage: dict[str, Any]) -> TokenUsage | None:
    fresh, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    if fresh is None and out is None:
        return None
    write = _int(usage.get("cache_creation_input_tokens")) or 0
    read = _int(usage.get("cache_read_input_tokens")) or 0
    prompt = (fresh or 0) + write + read
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=out or 0,
        cached_tokens=read,
        cache_write_tokens=write,
        total_tokens=prompt + (out or 0),
    )


def _responses_usage(usage: dict[str, Any]) -> TokenUsage | None:
    prompt, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    if prompt is None and out is None:
        return None
    prompt, out = prompt or 0, out or 0
    total = _int(usage.get("total_tokens"))
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=out,
        cached_tokens=_int((usage.get("input_tokens_details") or {}).get("cached_tokens")) or 0,
        reasoning_tokens=_int((usage.get("output_tokens_details") or {}).get("reasoning_tokens"))
        or 0,
        total_tokens=total if total is not None else prompt + out,
    )


def response_from_stream(route: str, events: list[Any]) -> dict[str, Any]:
    """The non-streamed document of `route` rebuilt from a stream's events."""
    events = [e for e in events if isinstance(e, dict)]
    if route == "messages":
        return message_from_stream(events)
    if route == "responses":
        return responses_from_stream(events)
    doc = chat_from_stream(events)
    if route == "completions":
        doc["object"] = "text_completion"
        doc["choices"] = _text_choices(events)
    return doc


def responses_from_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    for event in reversed(events):
        if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            if isinstance(event.get("response"), dict):
                return event["response"]
    # Cut off before the end: what was said so far, from the finished items.
    doc: dict[str, Any] = {"object": "response", "output": []}
    for event in events:
        if isinstance(event.get("response"), dict):
            doc.update({k: v for k, v in event["response"].items() if k != "output"})
        if event.get("type") == "response.output_item.done" and isinstance(event.get("item"), dict):
            doc["output"].append(event["item"])
        if event.get("type") == "error":
            doc["error"] = {k: v for k, v in event.items() if k != "type"}
    return doc


def message_from_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
    partial_json: dict[int, str] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            doc.update(event["message"])
            doc["content"] = list(doc.get("content") or [])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            index = event.get("index", len(doc["content"]))
            while len(doc["content"]) <= index:
                doc["content"].append({})
            doc["content"][index] = dict(event["content_block"])
        elif kind == "content_block_delta":
            _block_delta(doc["content"], partial_json, event)
        elif kind == "message_delta":
            doc.update(event.get("delta") or {})
            doc["usage"] = {**(doc.get("usage") or {}), **(event.get("usage") or {})}
        elif kind == "error":
            doc["error"] = event.get("error") or event
    for index, text in partial_json.items():
        try:
            doc["content"][index]["input"] = json.loads(text) if text else {}
        except (ValueError, IndexError):
            doc["content"][index]["input_json"] = text
    return doc


_DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


def _block_delta(blocks: list[dict], partial_json: dict[int, str], event: dict) -> None:
    index, delta = event.get("index", 0), event.get("delta") or {}
    if not isinstance(index, int) or not 0 <= index < len(blocks):
        return
    field = _DELTA_FIELDS.get(delta.get("type"))
    if field and isinstance(delta.get(field), str):
        blocks[index][field] = blocks[index].get(field, "") + delta[field]
    elif delta.get("type") == "input_json_delta":
        partial_json[index] = partial_json.get(index, "") + str(delta.get("partial_json") or "")


def _text_choices(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    choices: dict[int, dict[str, Any]] = {}
    for event in events:
        for chunk in event.get("choices") or []:
            index = chunk.get("index", 0)
            choice = choices.setdefault(
                index, {"index": index, "text": "", "finish_reason": None, "logprobs": None}
            )
            choice["text"] += chunk.get("text") or ""
            if chunk.get("finish_reason"):
                choice["finish_reason"] = chunk["finish_reason"]
            logprobs = chunk.get("logprobs")
            if isinstance(logprobs, dict):
                merged = choice["logprobs"] = choice["logprobs"] or {}
                for key, value in logprobs.items():
                    if isinstance(value, list):
                        merged.setdefault(key, []).extend(value)
    return [choices[i] for i in sorted(choices)]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
