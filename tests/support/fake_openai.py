"""A fake OpenAI-compatible upstream: the one thing the tests fake is the paid LLM provider.

Deterministic: the answer to a request depends only on the request. Plain and streamed chat
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

`/v1/responses`, `/v1/completions` and `/v1/embeddings` answer from tests/support/fake_wire.py.

As evalhub's verifier judge (a request whose `response_format` is the `evalhub_verdict` JSON
schema) it answers a verdict computed from the conversation it is shown: `judge_score(body)`,
with a fixed usage (`JUDGE_USAGE`). The judge's text (its rubric) steers it: `fake-judge:malformed`
answers prose instead of the JSON every time, `fake-judge:malformed-once` only until it is told
its answer was not valid, `fake-judge:delay=<seconds>` waits that long first.

It answers with a call of the first tool whenever the request has tools, unless the request's
`tool_choice` is "none" (as a policy asks for its final answer after a tool result).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support import fake_wire

MODELS = ["gpt-4o-mini", "o4-mini", "house-model"]
JUDGE_SCHEMA = "evalhub_verdict"
JUDGE_USAGE = {"prompt_tokens": 900, "completion_tokens": 60}
JUDGE_DELAY_RE = re.compile(r"fake-judge:delay=([0-9.]+)")


class FakeOpenAI:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.chunks_sent = 0
        self.failures: dict[str, int] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.other, methods=["POST"]),
                Route("/v1/completions", self.other, methods=["POST"]),
                Route("/v1/embeddings", self.other, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ]
        )

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
            return JSONResponse(fake_wire.embeddings(body))
        if path.endswith("/responses") and body.get("stream"):
            events = fake_wire.response_events(body)
            lines = [
                f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode() for kind, data in events
            ]
            return StreamingResponse(_iterate(lines), media_type="text/event-stream")
        if path.endswith("/responses"):
            return JSONResponse(fake_wire.response(body))
        if body.get("stream"):
            lines = [f"data: {json.dumps(c)}\n\n".encode() for c in fake_wire.text_chunks(body)]
            return StreamingResponse(_iterate([*lines, b"data: [DONE]\n\n"]),
                                     media_type="text/event-stream")  # fmt: skip
        return JSONResponse(fake_wire.text_completion(body))

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


def _words(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages") or []
    last = messages[-1].get("content") if messages else ""
    if not isinstance(last, str):
        last = json.dumps(last)
    return ["You", " said:", *(f" {w}" for w in last.split()[:8])]


def _id(body: dict[str, Any]) -> str:
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


def _model(body: dict[str, Any]) -> str:
    return (body.get("fake") or {}).get("answer_model") or body.get("model") or "gpt-4o-mini"


def completion(body: dict[str, Any]) -> dict[str, Any]:
    words = _words(body)
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
        "id": _id(body),
        "object": "chat.completion",
        "created": 1700000000,
        "model": _model(body),
        "system_fingerprint": "fp_fake",
        "choices": choices,
    }
    doc["usage"] = usage(body)
    return doc


def stream_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    words = _words(body)
    call = _tool_call(body)
    base = {
        "id": _id(body),
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": _model(body),
        "system_fingerprint": "fp_fake",
    }

    def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
        out = {**base, "choices": choices}
        if include_usage:
            out["usage"] = None
        return out

    chunks = []
    for index in range(body.get("n") or 1):
        chunks.append(
            chunk(
                [
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": "" if not call else None},
                        "finish_reason": None,
                        "logprobs": None,
                    }
                ]
            )
        )
        reasoning = (body.get("fake") or {}).get("reasoning")
        if reasoning:
            delta = {"reasoning_content": reasoning}
            chunks.append(
                chunk([{"index": index, "delta": delta, "finish_reason": None, "logprobs": None}])
            )
        if call:
            args = call["function"]["arguments"]
            half = len(args) // 2
            first = {
                "index": 0,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": args[:half]},
            }
            second = {"index": 0, "function": {"arguments": args[half:]}}
            for delta_call in (first, second):
                chunks.append(
                    chunk(
                        [
                            {
                                "index": index,
                                "delta": {"tool_calls": [delta_call]},
                                "finish_reason": None,
                                "logprobs": None,
                            }
                        ]
                    )
                )
        else:
            logprobs = _logprobs(words, body.get("top_logprobs") or 0)["content"]
            for i, word in enumerate(words):
                choice = {
                    "index": index,
                    "delta": {"content": word},
                    "finish_reason": None,
                    "logprobs": {"content": [logprobs[i]], "refusal": None}
                    if body.get("logprobs")
                    else None,
                }
                chunks.append(chunk([choice]))
        chunks.append(
            chunk(
                [
                    {
                        "index": index,
                        "delta": {},
                        "finish_reason": "tool_calls" if call else "stop",
                        "logprobs": None,
                    }
                ]
            )
        )
    reported = usage(body)
    if include_usage and reported:
        chunks.append({**base, "choices": [], "usage": reported})
    return chunks


def is_judge(body: dict[str, Any]) -> bool:
    rf = body.get("response_format")
    return isinstance(rf, dict) and (rf.get("json_schema") or {}).get("name") == JUDGE_SCHEMA


def judge_text(body: dict[str, Any]) -> str:
    return "\n".join(
        m["content"] for m in body.get("messages") or [] if isinstance(m.get("content"), str)
    )


def judge_score(body: dict[str, Any]) -> float:
    """The fake judge's score: a function of the first conversation it is shown (the judge's
    first user message), in [0, 1] with two decimals."""
    first = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    return int(hashlib.sha256(first.encode()).hexdigest()[:8], 16) % 101 / 100


def judge_completion(body: dict[str, Any]) -> dict[str, Any]:
    text = judge_text(body)
    retried = "Your answer was not valid" in text
    if "fake-judge:malformed" in text and not ("malformed-once" in text and retried):
        content = "The agent did well, I would say 8 out of 10."
    else:
        score = judge_score(body)
        content = json.dumps({"score": score, "justification": f"Fake verdict {score:.2f}."})
    prompt, completion_tokens = JUDGE_USAGE["prompt_tokens"], JUDGE_USAGE["completion_tokens"]
    return {
        "id": _id(body),
        "object": "chat.completion",
        "created": 1700000000,
        "model": _model(body),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


# For `uvicorn tests.support.fake_openai:app` (the benchmark runs the fake in its own process).
app = FakeOpenAI()
