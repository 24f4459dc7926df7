"""A recorded answer told again as a stream of its wire format (traces.calls.replay), for a
replayed call that asks to stream: the events a provider sends, built from the whole document
the call's row keeps, so the SDKs read it as they read a live stream and assemble the same
answer (`traces.calls.wire.response_from_stream` rebuilds the document from them)."""

from __future__ import annotations

import json
from typing import Any


def recorded_stream(route: str, doc: dict[str, Any], *, include_usage: bool) -> bytes:
    """The server-sent events of `doc`, an answer of `route`."""
    if route == "messages":
        return b"".join(_named(event) for event in message_events(doc))
    if route == "responses":
        return b"".join(_named(event) for event in response_events(doc))
    chunks = text_chunks(doc) if route == "completions" else chat_chunks(doc)
    if include_usage and doc.get("usage"):
        chunks.append({**_chunk_base(doc, route), "choices": [], "usage": doc["usage"]})
    return b"".join(_data(chunk) for chunk in chunks) + b"data: [DONE]\n\n"


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _named(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\n".encode() + _data(event)


def _chunk_base(doc: dict[str, Any], route: str) -> dict[str, Any]:
    kept = ("id", "model", "created", "system_fingerprint", "service_tier")
    base = {key: doc[key] for key in kept if doc.get(key) is not None}
    base["object"] = "text_completion" if route == "completions" else "chat.completion.chunk"
    return base


def chat_chunks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per choice: its message in one delta (tool calls numbered), then its finish reason."""
    base, chunks = _chunk_base(doc, "chat.completions"), []
    for choice in doc.get("choices") or []:
        index, message = choice.get("index", 0), choice.get("message") or {}
        delta: dict[str, Any] = {"role": message.get("role") or "assistant"}
        for key in ("content", "reasoning_content", "reasoning", "refusal"):
            if isinstance(message.get(key), str):
                delta[key] = message[key]
        calls = message.get("tool_calls") or []
        if calls:
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
        said = {"index": index, "delta": delta, "finish_reason": None}
        if choice.get("logprobs") is not None:
            said["logprobs"] = choice["logprobs"]
        end = {"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")}
        chunks += [{**base, "choices": [said]}, {**base, "choices": [end]}]
    return chunks


def text_chunks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    base = _chunk_base(doc, "completions")
    return [
        {**base, "choices": [{"index": c.get("index", 0), "text": c.get("text") or "",
                              "finish_reason": c.get("finish_reason"),
                              "logprobs": c.get("logprobs")}]}
        for c in doc.get("choices") or []
    ]  # fmt: skip


def response_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI Responses: created, each output item (a message's text as one delta), the end."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **data: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **data})

    begun = {**doc, "status": "in_progress", "output": [], "usage": None}
    add("response.created", response=begun)
    add("response.in_progress", response=begun)
    for i, item in enumerate(doc.get("output") or []):
        if item.get("type") != "message":
            add("response.output_item.added", output_index=i, item=item)
            add("response.output_item.done", output_index=i, item=item)
            continue
        add("response.output_item.added", output_index=i,
            item={**item, "content": [], "status": "in_progress"})  # fmt: skip
        for j, part in enumerate(item.get("content") or []):
            where = {"item_id": item.get("id"), "output_index": i, "content_index": j}
            text = part.get("text") if part.get("type") == "output_text" else None
            add("response.content_part.added", **where,
                part={**part, "text": ""} if text is not None else part)  # fmt: skip
            if text is not None:
                add("response.output_text.delta", **where, delta=text, logprobs=[])
                add("response.output_text.done", **where, text=text, logprobs=[])
            add("response.content_part.done", **where, part=part)
        add("response.output_item.done", output_index=i, item=item)
    status = doc.get("status")
    add(f"response.{status if status in ('incomplete', 'failed') else 'completed'}", response=doc)
    return events


def message_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Anthropic Messages: the message begun, each content block started, said in one delta
    and stopped, then the stop reason and output tokens, and the end."""
    usage = doc.get("usage") or {}
    begun = {**doc, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": begun}]
    for index, block in enumerate(doc.get("content") or []):
        start, deltas = _block_said(block)
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {"type": "message_delta",
         "delta": {"stop_reason": doc.get("stop_reason"),
                   "stop_sequence": doc.get("stop_sequence")},
         "usage": {"output_tokens": usage.get("output_tokens", 0)}}
    )  # fmt: skip
    events.append({"type": "message_stop"})
    return events


def _block_said(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the block as it starts, the deltas that complete it)."""
    kind = block.get("type")
    if kind == "text":
        return {**block, "text": ""}, [{"type": "text_delta", "text": block.get("text") or ""}]
    if kind == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking") or ""}]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        return {**block, "thinking": "", "signature": ""}, deltas
    if kind in ("tool_use", "server_tool_use"):
        said = json.dumps(block.get("input") or {})
        return {**block, "input": {}}, [{"type": "input_json_delta", "partial_json": said}]
    return block, []
