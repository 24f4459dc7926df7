"""A fake Anthropic provider speaking the Messages wire format (`POST /v1/messages`), plain and
streamed (message_start, content_block_*, message_delta, message_stop), with tool use,
thinking blocks and prompt-caching usage. Every request it receives is recorded (headers and
body) so tests can see what reached it.

Steered through the body field `"fake": {...}` (the SDKs' `extra_body`):
  input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens
  thinking: "..."    begin the answer with a thinking block
  fail_times, fail_status, retry_after, fail_key    as in evalhub/fakeprovider/server.py
It answers with a `tool_use` of the first tool whenever the request has tools and its last
message is not a tool result.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class FakeAnthropic:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.failures: dict[str, int] = {}
        self.app = Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])

    async def __call__(self, scope, receive, send):
        await self.app(scope, receive, send)

    async def messages(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.received.append(
            {"path": request.url.path, "headers": dict(request.headers), "body": body}
        )
        opts = body.get("fake") or {}
        key = str(opts.get("fail_key", "default"))
        if self.failures.get(key, 0) < (opts.get("fail_times") or 0):
            self.failures[key] = self.failures.get(key, 0) + 1
            headers = {"retry-after": str(opts["retry_after"])} if "retry_after" in opts else {}
            error = {"type": "rate_limit_error", "message": "fake: slow down"}
            return JSONResponse(
                {"type": "error", "error": error},
                status_code=opts.get("fail_status", 429),
                headers=headers,
            )
        if body.get("stream"):
            lines = [
                f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events(body)
            ]
            return StreamingResponse(_iterate(lines), media_type="text/event-stream")
        return JSONResponse(message(body))


async def _iterate(items: list[bytes]):
    for item in items:
        yield item


def usage(body: dict[str, Any]) -> dict[str, Any]:
    opts = body.get("fake") or {}
    return {
        "input_tokens": opts.get("input_tokens", 900),
        "cache_creation_input_tokens": opts.get("cache_creation_input_tokens", 0),
        "cache_read_input_tokens": opts.get("cache_read_input_tokens", 0),
        "output_tokens": opts.get("output_tokens", 250),
    }


def _last_text(body: dict[str, Any]) -> tuple[str, bool]:
    """(the last message's text, whether it is a tool result)."""
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages else ""
    if isinstance(content, str):
        return content, False
    texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    tool_result = any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return " ".join(texts), tool_result


def content(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    thinking = (body.get("fake") or {}).get("thinking")
    if thinking:
        blocks.append({"type": "thinking", "thinking": thinking, "signature": "sig-fake"})
    text, tool_result = _last_text(body)
    tools = body.get("tools") or []
    if tools and not tool_result:
        blocks.append(
            {
                "type": "tool_use",
                "id": "toolu_fake_1",
                "name": tools[0]["name"],
                "input": {"city": "Paris", "unit": "C"},
            }  # fmt: skip
        )
    else:
        words = text.split()[:8]
        blocks.append({"type": "text", "text": "You said: " + " ".join(words)})
    return blocks


def message(body: dict[str, Any]) -> dict[str, Any]:
    blocks = content(body)
    return {
        "id": "msg_fake_1",
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or "claude-sonnet-4-5",
        "content": blocks,
        "stop_reason": "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn",
        "stop_sequence": None,
        "usage": usage(body),
    }


def events(body: dict[str, Any]) -> list[dict[str, Any]]:
    final = message(body)
    start_usage = {**final["usage"], "output_tokens": 1}
    out: list[dict[str, Any]] = [
        {"type": "message_start",
         "message": {**final, "content": [], "stop_reason": None, "usage": start_usage}},
        {"type": "ping"},
    ]  # fmt: skip
    for index, block in enumerate(final["content"]):
        out.extend(_block_events(index, block))
    out.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": final["usage"]["output_tokens"]},
        }  # fmt: skip
    )
    out.append({"type": "message_stop"})
    return out


def _block_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    if kind == "text":
        start, deltas = (
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": piece} for piece in _halves(block["text"])],
        )
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _halves(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        start = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": p}
            for p in _halves(json.dumps(block["input"]))
        ]
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def _halves(text: str) -> list[str]:
    half = len(text) // 2
    return [text[:half], text[half:]]


# For `uvicorn tests.support.fake_anthropic:app` (the routes benchmark runs it in its own process).
app = FakeAnthropic()
