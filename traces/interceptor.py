"""The LLM interceptor: an OpenAI-compatible proxy on the hot path of every LLM call.

A lean ASGI app mounted beside Django in the same process (see `evalhub/asgi.py`): Django's
request machinery costs more per call than this whole handler (the README has the numbers).
Per call it does no database work at all once the token is cached: tokens resolve from an
in-process cache (`EVALHUB_INTERCEPTOR_TOKEN_TTL_S`), budgets are checked against per-job
spent totals kept in memory (re-read every `EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S`), and the
`LLMCall` row is written by a writer thread after the caller has its answer.

URLs: `/api/interceptor/v1/<token>/chat/completions` (POST) and `/api/interceptor/v1/<token>/models`.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import queue
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import DatabaseError, connection

from traces import selectors, services, totals
from traces.models import BUDGET_EXCEEDED
from traces.redaction import RedactingFilter
from traces.tokens import INTERCEPTOR_PATH as PREFIX
from traces.tokens import token_hash

log = logging.getLogger(__name__)

# Response headers of the upstream worth handing on; everything else (cookies, encodings,
# hop-by-hop headers, lengths we recompute) stays behind.
_PASS_HEADERS = {
    b"content-type",
    b"x-request-id",
    b"openai-processing-ms",
    b"openai-version",
    b"openai-model",
    b"retry-after",
    b"retry-after-ms",
    b"x-should-retry",
}
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_NEG_TTL_S = 1.0
_WRITER_LINGER_S = 0.05
_CLIENT_SHARDS = 8
_MAX_CACHED_TOKENS = 100_000


@dataclass
class _Spent:
    cost: float
    tokens: int
    refreshed_at: float
    refreshing: bool = False


class InterceptorError(Exception):
    """An answer of our own (not the upstream's), in OpenAI's error shape."""

    def __init__(self, status: int, type_: str, message: str):
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message

    def body(self) -> bytes:
        return _error_body(self.message, self.type)


def _error_body(message: str, type_: str, code: Any = None) -> bytes:
    error = {"message": message, "type": type_, "param": None, "code": code or type_}
    return json.dumps({"error": error}).encode()


class CallWriter:
    """A thread that saves call records in batches, so the event loop never waits on the DB."""

    def __init__(self, on_built=None):
        self._queue: queue.Queue[services.CallRecord] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._on_built = on_built

    def submit(self, record: services.CallRecord) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="interceptor-writer", daemon=True
                    )
                    self._thread.start()
        self._queue.put_nowait(record)

    def flush(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            # Linger a moment so calls finishing together share one transaction.
            time.sleep(_WRITER_LINGER_S)
            while len(batch) < 200:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._save(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _save(self, batch: list[services.CallRecord]) -> None:
        calls = []
        for record in batch:
            try:
                calls.append(services.llm_call_build(record=record))
            except Exception:
                log.exception("could not read an LLM call of attempt %s", record.attempt_id)
        # Count the spending before the rows become visible, so that a call that sees a
        # recorded row also sees its cost in the budget.
        if self._on_built:
            self._on_built(batch, calls)
        for try_ in range(3):
            try:
                services.llm_calls_save(calls=calls)
                return
            except Exception:
                log.exception("saving %d LLM call(s) failed (try %d)", len(calls), try_ + 1)
                connection.close()  # a broken connection is reopened on the next try
                time.sleep(0.5 * (try_ + 1))


class Interceptor:
    def __init__(self) -> None:
        self._clients: list[httpx.AsyncClient] | None = None
        self._next_client = 0
        self._tokens: dict[str, tuple[float, selectors.AttemptAccess | None]] = {}
        self._spent: dict[str, _Spent] = {}
        self._spent_lock = threading.Lock()
        self._db = ThreadPoolExecutor(max_workers=2, thread_name_prefix="interceptor-db")
        self.writer = CallWriter(on_built=self._count_spent)
        # The writer thread's batches hold the GIL for up to the switch interval (5 ms by
        # default) while a call waits on the event loop; 1 ms keeps that wait off the p99.
        sys.setswitchinterval(0.001)
        atexit.register(self.writer.flush)

    # --- plumbing -------------------------------------------------------------------------
    @property
    def client(self) -> httpx.AsyncClient:
        """One pooled client, split in a few shards taken in turn.

        httpcore checks every connection of a pool (a poll() per idle socket) on each request
        and each response close, so with dozens of connections in flight that bookkeeping
        outweighed the forwarding itself; a few smaller pools keep it short."""
        if self._clients is None:
            per_shard = max(1, settings.EVALHUB_INTERCEPTOR_MAX_CONNECTIONS // _CLIENT_SHARDS)
            self._clients = [
                httpx.AsyncClient(
                    timeout=httpx.Timeout(
                        settings.EVALHUB_INTERCEPTOR_READ_TIMEOUT_S,
                        connect=settings.EVALHUB_INTERCEPTOR_CONNECT_TIMEOUT_S,
                    ),
                    limits=httpx.Limits(
                        max_connections=per_shard,
                        max_keepalive_connections=min(per_shard, 50),
                        keepalive_expiry=30.0,
                    ),
                    follow_redirects=False,
                    trust_env=False,
                )
                for _ in range(_CLIENT_SHARDS)
            ]
        self._next_client = (self._next_client + 1) % _CLIENT_SHARDS
        return self._clients[self._next_client]

    async def aclose(self) -> None:
        clients, self._clients = self._clients or [], None
        for client in clients:
            await client.aclose()
        await asyncio.get_running_loop().run_in_executor(None, self.writer.flush)

    async def _in_db_thread(self, fn, /, **kwargs):
        """Run a read in one of our own DB threads. They keep their connection open (reopening
        costs more than the read); one that fails is closed and the read tried once more."""

        def run():
            try:
                return fn(**kwargs)
            except DatabaseError:
                connection.close()
                return fn(**kwargs)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._db, run)
        except DatabaseError as exc:
            log.exception("the interceptor could not read the database")
            raise InterceptorError(
                503, "service_unavailable", "The interceptor cannot reach its database."
            ) from exc

    # --- tokens and budgets -----------------------------------------------------------------
    async def _access(self, token: str) -> selectors.AttemptAccess:
        digest = token_hash(token)
        now = time.monotonic()
        hit = self._tokens.get(digest)
        if hit is not None and hit[0] > now:
            access = hit[1]
        else:
            access = await self._in_db_thread(selectors.attempt_access_get, token_hash=digest)
            if access is not None and access.has_budget and access.job_id not in self._spent:
                cost, tokens = await self._in_db_thread(totals.job_spent, job_id=access.job_id)
                self._spent[access.job_id] = _Spent(cost, tokens, time.monotonic())
            if len(self._tokens) > _MAX_CACHED_TOKENS:
                self._tokens = {k: v for k, v in self._tokens.items() if v[0] > now}
            ttl = settings.EVALHUB_INTERCEPTOR_TOKEN_TTL_S if access else _NEG_TTL_S
            self._tokens[digest] = (now + ttl, access)
        if access is None:
            raise InterceptorError(401, "invalid_token", "Unknown interceptor token.")
        if not access.running:
            ended = access.finished_at or datetime.now(UTC)
            grace = timedelta(seconds=settings.EVALHUB_INTERCEPTOR_GRACE_S)
            if datetime.now(UTC) > ended + grace:
                raise InterceptorError(
                    410, "rollout_ended", "This rollout has ended; its inference URL is closed."
                )
        return access

    def _budget_check(self, access: selectors.AttemptAccess) -> None:
        spent = self._spent.get(access.job_id)
        if spent is None:
            return
        if (
            not spent.refreshing
            and time.monotonic() - spent.refreshed_at
            > settings.EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S
        ):
            spent.refreshing = True
            asyncio.get_running_loop().create_task(self._spent_refresh(access.job_id))
        if access.max_cost_usd is not None and spent.cost >= access.max_cost_usd:
            raise InterceptorError(
                429,
                BUDGET_EXCEEDED,
                f"The job's budget is spent: ${spent.cost:.6f} of max_cost_usd "
                f"${access.max_cost_usd:g}.",
            )
        if access.max_tokens is not None and spent.tokens >= access.max_tokens:
            raise InterceptorError(
                429,
                BUDGET_EXCEEDED,
                f"The job's budget is spent: {spent.tokens} of max_tokens {access.max_tokens}.",
            )

    async def _spent_refresh(self, job_id: str) -> None:
        try:
            cost, tokens = await self._in_db_thread(totals.job_spent, job_id=job_id)
            with self._spent_lock:
                # Spending only grows. The database may not have this process's newest calls
                # yet (the writer saves them after counting them here): never count back down.
                local = self._spent.get(job_id)
                if local is not None:
                    cost, tokens = max(cost, local.cost), max(tokens, local.tokens)
                self._spent[job_id] = _Spent(cost, tokens, time.monotonic())
        except Exception:
            log.exception("refreshing the spent totals of job %s failed", job_id)
            spent = self._spent.get(job_id)
            if spent:
                spent.refreshing = False

    def _count_spent(self, records, calls) -> None:
        """Writer thread: add the calls about to be recorded to the in-memory totals."""
        job_of = {record.attempt_id: record.job_id for record in records}
        with self._spent_lock:
            for call in calls:
                spent = self._spent.get(job_of[call.attempt_id])
                if spent is not None:
                    spent.cost += call.cost_usd or 0.0
                    spent.tokens += call.total_tokens or 0

    # --- ASGI ------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        path: str = scope["path"]
        token, _, tail = (
            path[len(PREFIX) :].partition("/") if path.startswith(PREFIX) else ("", "", "")
        )
        tail = tail.rstrip("/")
        method = scope["method"]
        try:
            if not token or tail not in ("chat/completions", "models"):
                raise InterceptorError(
                    404, "not_found", "Use <inference_url>/chat/completions or /models."
                )
            if tail == "models":
                if method != "GET":
                    raise InterceptorError(405, "method_not_allowed", "Use GET.")
                await self._models(token, send)
            else:
                if method != "POST":
                    raise InterceptorError(405, "method_not_allowed", "Use POST.")
                await self._chat(scope, token, receive, send)
        except InterceptorError as exc:
            await _send_json(send, exc.status, exc.body(), retry=False)

    async def _models(self, token: str, send) -> None:
        access = await self._access(token)
        upstream = self._upstream(access)
        try:
            resp = await self.client.get(
                f"{upstream['base_url']}/models", headers=_auth(upstream["api_key"])
            )
        except httpx.TimeoutException as exc:
            raise InterceptorError(504, "upstream_timeout", "The provider timed out.") from exc
        except httpx.HTTPError as exc:
            raise InterceptorError(
                502, "upstream_unreachable", "The provider is unreachable."
            ) from exc
        body = resp.content
        if resp.status_code >= 400 and not _is_openai_error(body):
            body = _error_body(f"The provider answered {resp.status_code}.", "upstream_error")
        await _send_json(send, resp.status_code, body, headers=_pass_headers(resp))

    def _upstream(self, access: selectors.AttemptAccess) -> dict[str, Any]:
        upstream = settings.EVALHUB_UPSTREAMS.get(access.provider)
        if upstream is None:
            raise InterceptorError(
                502,
                "provider_not_configured",
                f"Provider {access.provider!r} is not configured on this server.",
            )
        return upstream

    async def _chat(self, scope, token: str, receive, send) -> None:
        t0 = time.perf_counter()
        started_at = datetime.now(UTC)
        access = await self._access(token)
        body = await _read_body(scope, receive, settings.EVALHUB_MAX_REQUEST_BYTES)
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise InterceptorError(
                400, "invalid_request_error", "The body must be a JSON object."
            ) from exc
        upstream = settings.EVALHUB_UPSTREAMS.get(access.provider)
        record = services.CallRecord(
            attempt_id=access.attempt_id,
            job_id=access.job_id,
            provider=access.provider,
            price_provider=(upstream or {}).get("price_provider"),
            request=request,
            started_at=started_at,
            stream=bool(request.get("stream")),
        )
        try:
            self._budget_check(access)
            upstream = self._upstream(access)
        except InterceptorError as exc:
            record.forwarded = False
            record.http_status = exc.status
            record.error = f"{exc.type}: {exc.message}"
            self.writer.submit(record)
            raise
        try:
            await self._forward(record, upstream, body, receive, send, t0)
        except Exception as exc:
            record.error = record.error or f"internal_error: {type(exc).__name__}"
            raise
        finally:
            record.latency_ms = (time.perf_counter() - t0) * 1000
            self.writer.submit(record)

    async def _forward(self, record, upstream, body: bytes, receive, send, t0: float) -> None:
        request = record.request
        strip_usage = False
        if record.stream:
            options = request.get("stream_options")
            if not (isinstance(options, dict) and options.get("include_usage")):
                # Ask for usage anyway; the extra usage-only chunk is kept from the caller.
                options = dict(options) if isinstance(options, dict) else {}
                options["include_usage"] = True
                body = json.dumps({**request, "stream_options": options}).encode()
                strip_usage = True
        headers = {"content-type": "application/json", **_auth(upstream["api_key"])}
        client = self.client
        req = client.build_request(
            "POST", f"{upstream['base_url']}/chat/completions", content=body, headers=headers
        )
        try:
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as exc:
            timeout = isinstance(exc, httpx.TimeoutException)
            status, type_ = (504, "upstream_timeout") if timeout else (502, "upstream_unreachable")
            message = (
                f"The provider {'timed out' if timeout else 'is unreachable'}: {type(exc).__name__}"
            )
            record.http_status, record.error = status, f"{type_}: {message}"
            await _send_json(send, status, _error_body(message, type_))
            return
        # Time to first byte: the headers (a non-streamed answer comes right behind them).
        record.ttft_ms = (time.perf_counter() - t0) * 1000
        try:
            record.http_status = resp.status_code
            is_sse = resp.headers.get("content-type", "").startswith("text/event-stream")
            if resp.status_code == 200 and is_sse:
                await self._relay_stream(record, resp, receive, send, t0, strip_usage)
                return
            try:
                data = await resp.aread()
            except httpx.HTTPError as exc:
                timeout = isinstance(exc, httpx.TimeoutException)
                status, type_ = (504, "upstream_timeout") if timeout else (502, "upstream_error")
                message = f"The provider's answer {'stalled' if timeout else 'was cut off'}."
                record.http_status, record.error = status, f"{type_}: {type(exc).__name__}"
                await _send_json(send, status, _error_body(message, type_))
                return
            record.response_body = data
            if resp.status_code >= 400:
                record.error = f"upstream answered {resp.status_code}: {data[:2000].decode('utf-8', 'replace')}"
                if not _is_openai_error(data):
                    data = _error_body(
                        f"The provider answered {resp.status_code}.",
                        "upstream_error",
                        resp.status_code,
                    )
            await _send_json(send, resp.status_code, data, headers=_pass_headers(resp))
        finally:
            await resp.aclose()

    async def _relay_stream(
        self, record, resp: httpx.Response, receive, send, t0: float, strip_usage: bool
    ):
        record.response_is_sse = True
        # The body is read, so the next ASGI message is the caller hanging up: then stop reading
        # the provider (closing its stream stops the generation we would pay for).
        hangup = asyncio.ensure_future(receive())
        raw: list[bytes] = []
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*_pass_headers(resp), (b"cache-control", b"no-cache")],
            }
        )
        pending = b""
        try:
            async for chunk in resp.aiter_bytes():
                if not raw:  # a stream's headers come at once; its first chunk is what counts
                    record.ttft_ms = (time.perf_counter() - t0) * 1000
                raw.append(chunk)
                if hangup.done():
                    record.error = "client_disconnected: the caller closed the stream"
                    break
                if not strip_usage:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    continue
                pending += chunk
                out, pending = _complete_events(pending)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            if pending:
                await send({"type": "http.response.body", "body": pending, "more_body": True})
        except httpx.HTTPError as exc:
            record.http_status = 502
            record.error = (
                f"stream_interrupted: the provider's stream broke off ({type(exc).__name__})"
            )
            event = (
                b"data: "
                + _error_body(
                    "The provider's stream broke off midway.",
                    "upstream_error",
                    "stream_interrupted",
                )
                + b"\n\n"
            )
            await send({"type": "http.response.body", "body": event, "more_body": True})
        except OSError as exc:  # the caller went away
            record.error = f"client_disconnected: {type(exc).__name__}"
        finally:
            hangup.cancel()
            record.response_body = b"".join(raw)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _complete_events(buffer: bytes) -> tuple[bytes, bytes]:
    """(the complete SSE events of `buffer` minus the usage-only chunk, the incomplete rest)."""
    out = []
    start = 0
    for match in _EVENT_END.finditer(buffer):
        event = buffer[start : match.end()]
        start = match.end()
        if not _is_usage_only(event):
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


async def _read_body(scope, receive, limit: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise InterceptorError(413, "request_too_large", _too_large(limit))
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InterceptorError(400, "client_disconnected", "The request was not completed.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise InterceptorError(413, "request_too_large", _too_large(limit))
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _too_large(limit: int) -> str:
    return f"The request body is larger than {limit} bytes (EVALHUB_MAX_REQUEST_BYTES)."


def _auth(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _pass_headers(resp: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower(), value)
        for name, value in resp.headers.raw
        if name.lower() in _PASS_HEADERS or name.lower().startswith(b"x-ratelimit-")
    ]


def _is_openai_error(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


async def _send_json(send, status: int, body: bytes, *, headers=None, retry: bool | None = None):
    out = [(k, v) for k, v in (headers or []) if k != b"content-type"]
    out.append((b"content-type", b"application/json"))
    out.append((b"content-length", str(len(body)).encode()))
    if retry is False:
        # Our own refusals (bad token, ended rollout, spent budget) do not get better on retry;
        # the OpenAI SDKs read this header and stop retrying.
        out.append((b"x-should-retry", b"false"))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


logging.getLogger("uvicorn.access").addFilter(RedactingFilter())
interceptor = Interceptor()
