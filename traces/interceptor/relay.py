"""Forwarding one call to the provider and relaying its answer, plain or streamed, as the
bytes arrive; what happened goes into the call's record.

When a streaming caller did not ask for usage, usage is asked for anyway and the provider's
usage-only chunk (`"choices": []`) is kept from the caller. A provider that echoes its key (in an
error, in content) has it masked in what is relayed and in what is stored: a stream is then
relayed event by event, so a key split across two chunks is still found. Everything else passes
byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable

from evalhub import metrics
from traces.calls.recording import CallRecord
from traces.interceptor.asgi import pass_headers, send_json
from traces.interceptor.clients import UPSTREAM_ERRORS, UpstreamResponse
from traces.interceptor.errors import error_body, is_openai_error, upstream_failure
from traces.redaction import server_redactor

_EVENT_END = re.compile(rb"\r?\n\r?\n")


def _anthropic(record: CallRecord) -> bool:
    """Whether the caller speaks Anthropic's Messages API (its errors have their own shape)."""
    return record.route == "messages"


def with_usage_asked(record: CallRecord, body: bytes) -> tuple[bytes, bool]:
    """(the body to send, whether the usage-only chunk must be stripped from the stream), for
    the routes whose streams carry usage only when asked (chat and text completions)."""
    request = record.request
    if not record.stream:
        return body, False
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        return body, False
    options = dict(options) if isinstance(options, dict) else {}
    options["include_usage"] = True
    return json.dumps({**request, "stream_options": options}).encode(), True


async def forward(record: CallRecord, open_: Callable[[], Awaitable[UpstreamResponse]], receive,
                  send, t0: float, strip_usage: bool) -> None:  # fmt: skip
    """Relay what `open_` (the provider's answer, after any retries) brings."""
    try:
        resp = await open_()
    except UPSTREAM_ERRORS as exc:
        failure = upstream_failure(exc)
        record.http_status, record.error = failure.status, f"{failure.type}: {failure.message}"
        await send_json(send, failure.status, failure.body(anthropic=_anthropic(record)))
        return
    # Time to first byte: the headers (a non-streamed answer comes right behind them).
    record.ttft_ms = (time.perf_counter() - t0) * 1000
    try:
        record.http_status = resp.status_code
        is_sse = resp.headers.get("content-type", "").startswith("text/event-stream")
        if resp.status_code == 200 and is_sse:
            await relay_stream(record, resp, receive, send, t0, strip_usage)
        else:
            await relay_plain(record, resp, send)
    finally:
        await resp.aclose()
        metrics.interceptor_added_observe(time.perf_counter() - t0 - resp.waited_s)


async def relay_plain(record: CallRecord, resp: UpstreamResponse, send) -> None:
    try:
        data = await resp.aread()
    except UPSTREAM_ERRORS as exc:
        failure = upstream_failure(exc, answering=True)
        record.http_status, record.error = failure.status, f"{failure.type}: {type(exc).__name__}"
        await send_json(send, failure.status, failure.body(anthropic=_anthropic(record)))
        return
    data = server_redactor().raw(data)
    record.response_body = data
    if resp.status_code >= 400:
        excerpt = data[:2000].decode("utf-8", "replace")
        record.error = f"upstream answered {resp.status_code}: {excerpt}"
        if not is_openai_error(data):
            data = error_body(
                f"The provider answered {resp.status_code}.", "upstream_error", resp.status_code,
                anthropic=_anthropic(record),
            )  # fmt: skip
    await send_json(send, resp.status_code, data, headers=pass_headers(resp))


async def relay_stream(record: CallRecord, resp: UpstreamResponse, receive, send, t0: float,
                       strip_usage: bool) -> None:  # fmt: skip
    record.response_is_sse = True
    # The body is read, so the next ASGI message is the caller hanging up: then stop reading
    # the provider (closing its stream stops the generation we would pay for).
    hangup = asyncio.ensure_future(receive())
    raw: list[bytes] = []
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*pass_headers(resp), (b"cache-control", b"no-cache")],
        }
    )
    try:
        await _pump(record, resp, send, hangup, raw, t0, strip_usage)
    except UPSTREAM_ERRORS as exc:
        record.http_status = 502
        record.error = f"stream_interrupted: the provider's stream broke off ({type(exc).__name__})"
        message = "The provider's stream broke off midway."
        body = error_body(message, "upstream_error", "stream_interrupted",
                          anthropic=_anthropic(record))  # fmt: skip
        # Anthropic's SDKs read the event's name; OpenAI's the data's `error`.
        event = (b"event: error\n" if _anthropic(record) else b"") + b"data: " + body + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
    except OSError as exc:  # the caller went away
        record.error = f"client_disconnected: {type(exc).__name__}"
    finally:
        hangup.cancel()
        record.response_body = server_redactor().raw(b"".join(raw))
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _pump(record, resp, send, hangup, raw: list[bytes], t0: float, strip_usage: bool):
    redactor = server_redactor()
    by_event = strip_usage or bool(redactor.secrets)
    pending = b""
    async for chunk in resp.aiter_bytes():
        if not raw:  # a stream's headers come at once; its first chunk is what counts
            record.ttft_ms = (time.perf_counter() - t0) * 1000
        raw.append(chunk)
        if hangup.done():
            record.error = "client_disconnected: the caller closed the stream"
            break
        if not by_event:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            continue
        pending += chunk
        out, pending = complete_events(pending, strip_usage=strip_usage)
        if out:
            out = redactor.raw(out)
            await send({"type": "http.response.body", "body": out, "more_body": True})
    if pending:
        pending = redactor.raw(pending)
        await send({"type": "http.response.body", "body": pending, "more_body": True})


def complete_events(buffer: bytes, *, strip_usage: bool = True) -> tuple[bytes, bytes]:
    """(the complete SSE events of `buffer`, minus the usage-only chunk when `strip_usage`,
    the incomplete rest)."""
    out = []
    start = 0
    for match in _EVENT_END.finditer(buffer):
        event = buffer[start : match.end()]
        start = match.end()
        if not (strip_usage and _is_usage_only(event)):
            out.append(event)
    return b"".join(out), buffer[start:]


def _is_usage_only(event: bytes) -> bool:
    if b'"choices":[]' not in event and b'"choices": []' not in event:
        return False
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:])
            except ValueError:
                return False
            return isinstance(data, dict) and data.get("choices") == [] and bool(data.get("usage"))
    return False
