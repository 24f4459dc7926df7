"""The fake OpenAI-compatible provider (see the package's docstring): the app and its routes.

Deterministic: the answer to a request depends only on the request (chat.py: an arithmetic
question answered, right most of the time; a tool called; else the last message said back). Plain and streamed chat
completions (with or without `stream_options.include_usage`), tool calls, logprobs, `n`, usage
with cached and reasoning token details, and `GET /v1/models`. Every request it receives is
recorded (headers and body) so tests can see what reached it.

A request steers the fake through an extra body field the interceptor passes through untouched,
`"fake": {...}`:
  prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens  the usage it reports
  no_usage: true          answer without any usage (also in streams)
  answer_model: "..."     the model name it answers with (default: the requested one)
  error_status: 429       answer that status with an OpenAI error body
  html_error: true        ...with an HTML body instead
  cut_after: 2            stream that many chunks, then drop the connection
  delay_s: 3              wait before answering
  chunk_delay_s: 0.2      wait between streamed chunks
  reasoning: "..."        answer with that text as `reasoning_content`, as reasoning models do
  echo_key: true          put the key it was called with in its reasoning and in an error
                          body (a provider that leaks its caller's key: it must go no further)
  tool_name: "..."        the tool it calls (default: the request's first tool)
  tool_arguments: {...}   the arguments it calls the tool with (default: a city and a unit)
  fail_times: 2           answer the first 2 requests of the same `fail_key` with
                          `fail_status` (429) and `retry-after: <retry_after>` when given

`/v1/responses`, `/v1/completions` and `/v1/embeddings` answer from wire.py.

As evalhub's verifier judge (a request whose `response_format` is the `evalhub_verdict` JSON
schema) it answers a verdict computed from the conversation it is shown: `judge_score(body)`,
with a fixed usage (`JUDGE_USAGE`; judge.py). The judge's text (its rubric) steers it: `fake-judge:malformed`
answers prose instead of the JSON every time, `fake-judge:malformed-once` only until it is told
its answer was not valid, `fake-judge:delay=<seconds>` waits that long first.

It answers with a call of the first tool whenever the request has tools, unless the request's
`tool_choice` is "none" (as a policy asks for its final answer after a tool result).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import evalhub.fakeprovider.wire as wire
from evalhub.fakeprovider.chat import completion, stream_chunks
from evalhub.fakeprovider.judge import JUDGE_DELAY_RE, is_judge, judge_completion, judge_text

MODELS = ["gpt-4o-mini", "o4-mini", "house-model"]


class FakeOpenAI:
    def __init__(self) -> None:
        self.reset()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.other, methods=["POST"]),
                Route("/v1/completions", self.other, methods=["POST"]),
                Route("/v1/embeddings", self.other, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ]
        )

    def reset(self) -> None:
        """Forget what reached it (a server shared by several tests)."""
        self.received: list[dict[str, Any]] = []
        self.chunks_sent = 0
        self.failures: dict[str, int] = {}

    async def __call__(self, scope, receive, send):
        await self.app(scope, receive, send)

    async def models(self, request: Request) -> Response:
        self._record(request, None)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"}
                    for m in MODELS
                ],
            }
        )

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        self._record(request, body)
        opts = body.get("fake") or {}
        refusal = self.refusal(opts)
        if refusal is not None:
            return refusal
        if opts.get("echo_key"):
            key = request.headers.get("authorization", "").removeprefix("Bearer ")
            opts["reasoning"] = f"I was called with the key {key}"
            if opts.get("error_status"):
                return JSONResponse({"error": {"message": f"bad key {key}"}}, status_code=400)
        if opts.get("delay_s"):
            await asyncio.sleep(opts["delay_s"])
        if opts.get("html_error"):
            return HTMLResponse("<html><body>Bad gateway</body></html>", status_code=502)
        if opts.get("error_status"):
            status = opts["error_status"]
            return JSONResponse(
                {
                    "error": {
                        "message": f"fake upstream error {status}",
                        "type": "invalid_request_error" if status < 500 else "server_error",
                        "param": None,
                        "code": f"fake_{status}",
                    }
                },
                status_code=status,
            )
        if is_judge(body):
            delay = JUDGE_DELAY_RE.search(judge_text(body))
            if delay:
                await asyncio.sleep(float(delay.group(1)))
            return JSONResponse(judge_completion(body))
        if body.get("stream"):
            return StreamingResponse(self._stream(body, opts), media_type="text/event-stream")
        return JSONResponse(completion(body))

    def refusal(self, opts: dict[str, Any]) -> Response | None:
        """The `fail_times` answers: a rate limit (or outage) for the first tries."""
        key = str(opts.get("fail_key", "default"))
        if self.failures.get(key, 0) >= (opts.get("fail_times") or 0):
            return None
        self.failures[key] = self.failures.get(key, 0) + 1
        status = opts.get("fail_status", 429)
        headers = {"retry-after": str(opts["retry_after"])} if "retry_after" in opts else {}
        error = {"message": f"fake {status}: slow down", "type": "rate_limit_error",
                 "param": None, "code": "rate_limit_exceeded"}  # fmt: skip
        return JSONResponse({"error": error}, status_code=status, headers=headers)

    async def other(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self._record(request, body)
        refusal = self.refusal(body.get("fake") or {})
        if refusal is not None:
            return refusal
        path = request.url.path
        if path.endswith("/embeddings"):
            return JSONResponse(wire.embeddings(body))
        if path.endswith("/responses") and body.get("stream"):
            events = wire.response_events(body)
            lines = [
                f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode() for kind, data in events
            ]
            return StreamingResponse(_iterate(lines), media_type="text/event-stream")
        if path.endswith("/responses"):
            return JSONResponse(wire.response(body))
        if body.get("stream"):
            lines = [f"data: {json.dumps(c)}\n\n".encode() for c in wire.text_chunks(body)]
            return StreamingResponse(_iterate([*lines, b"data: [DONE]\n\n"]),
                                     media_type="text/event-stream")  # fmt: skip
        return JSONResponse(wire.text_completion(body))

    def _record(self, request: Request, body: Any) -> None:
        self.received.append(
            {
                "path": request.url.path,
                "headers": dict(request.headers),
                "body": body,
                "at": time.monotonic(),
            }  # fmt: skip
        )

    async def _stream(self, body: dict[str, Any], opts: dict[str, Any]):
        chunks = stream_chunks(body)
        for i, chunk in enumerate(chunks):
            if opts.get("cut_after") is not None and i >= opts["cut_after"]:
                raise ConnectionResetError("fake upstream cut the stream")
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            self.chunks_sent += 1
            await asyncio.sleep(opts.get("chunk_delay_s", 0))
        yield b"data: [DONE]\n\n"


async def _iterate(items: list[bytes]):
    for item in items:
        yield item


# For `uvicorn evalhub.fakeprovider.server:app` (the benchmark runs the fake in its own process).
app = FakeOpenAI()
