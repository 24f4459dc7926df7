"""The interceptor's ASGI app: routes a call, refuses what must not reach the provider,
forwards the rest and hands the record to the writer."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from django.conf import settings

from traces import selectors, services
from traces.interceptor.access import TokenCache
from traces.interceptor.asgi import pass_headers, read_body, send_json
from traces.interceptor.budgets import Budgets
from traces.interceptor.clients import ClientShards
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import (
    InterceptorError,
    error_body,
    is_openai_error,
    upstream_failure,
)
from traces.interceptor.relay import auth_headers, forward
from traces.interceptor.writer import CallWriter
from traces.redaction import RedactingFilter, server_redactor
from traces.tokens import INTERCEPTOR_PATH

ROUTES = {"chat/completions": "POST", "models": "GET"}


class Interceptor:
    """Holds no process-wide state until `startup()`; the ASGI lifespan calls it."""

    def __init__(self) -> None:
        db = DbThreads()
        self.tokens = TokenCache(db)
        self.budgets = Budgets(db)
        self.clients = ClientShards()
        self.writer = CallWriter(on_built=self.budgets.count)

    def startup(self) -> None:
        # The writer thread's batches hold the GIL for up to the switch interval (5 ms by
        # default) while a call waits on the event loop; 1 ms keeps that wait off the p99.
        sys.setswitchinterval(0.001)
        # uvicorn's loggers print request paths, which carry tokens.
        for name in ("uvicorn.access", "uvicorn.error"):
            logging.getLogger(name).addFilter(RedactingFilter())

    async def aclose(self) -> None:
        await self.clients.aclose()
        await asyncio.get_running_loop().run_in_executor(None, self.writer.flush)

    async def __call__(self, scope, receive, send) -> None:
        path: str = scope["path"]
        rest = path[len(INTERCEPTOR_PATH) :] if path.startswith(INTERCEPTOR_PATH) else ""
        token, _, tail = rest.partition("/")
        tail = tail.rstrip("/")
        try:
            if not token or tail not in ROUTES:
                raise InterceptorError(
                    404, "not_found", "Use <inference_url>/chat/completions or /models."
                )
            if scope["method"] != ROUTES[tail]:
                raise InterceptorError(405, "method_not_allowed", f"Use {ROUTES[tail]}.")
            if tail == "models":
                await self._models(token, send)
            else:
                await self._chat(scope, token, receive, send)
        except InterceptorError as exc:
            await send_json(send, exc.status, exc.body(), retry=False)

    async def _models(self, token: str, send) -> None:
        access = await self.tokens.access(token)
        upstream = _upstream(access)
        try:
            resp = await self.clients.next().get(
                f"{upstream['base_url']}/models", headers=auth_headers(upstream["api_key"])
            )
        except httpx.HTTPError as exc:
            raise upstream_failure(exc) from exc
        body = server_redactor().raw(resp.content)
        if resp.status_code >= 400 and not is_openai_error(body):
            body = error_body(f"The provider answered {resp.status_code}.", "upstream_error")
        await send_json(send, resp.status_code, body, headers=pass_headers(resp))

    async def _chat(self, scope, token: str, receive, send) -> None:
        t0 = time.perf_counter()
        started_at = datetime.now(UTC)
        access = await self.tokens.access(token)
        await self.budgets.track(access)
        body = await read_body(scope, receive, settings.EVALHUB_MAX_REQUEST_BYTES)
        record = _record(access, _request(body), started_at)
        try:
            self.budgets.check(access)
            upstream = _upstream(access)
        except InterceptorError as exc:
            record.forwarded = False
            record.http_status = exc.status
            record.error = f"{exc.type}: {exc.message}"
            self.writer.submit(record)
            raise
        url = f"{upstream['base_url']}/chat/completions"
        try:
            await forward(
                self.clients.next(), record, url, upstream["api_key"], body, receive, send, t0
            )
        except Exception as exc:
            record.error = record.error or f"internal_error: {type(exc).__name__}"
            raise
        finally:
            record.latency_ms = (time.perf_counter() - t0) * 1000
            self.writer.submit(record)


def _request(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body)
    except ValueError:
        request = None
    if not isinstance(request, dict):
        raise InterceptorError(400, "invalid_request_error", "The body must be a JSON object.")
    return request


def _record(access: selectors.AttemptAccess, request: dict, started_at) -> services.CallRecord:
    upstream = settings.EVALHUB_UPSTREAMS.get(access.provider) or {}
    return services.CallRecord(
        attempt_id=access.attempt_id,
        job_id=access.job_id,
        provider=access.provider,
        price_provider=upstream.get("price_provider"),
        request=request,
        started_at=started_at,
        stream=bool(request.get("stream")),
        kind=access.kind,
    )


def _upstream(access: selectors.AttemptAccess) -> dict[str, Any]:
    upstream = settings.EVALHUB_UPSTREAMS.get(access.provider)
    if upstream is None:
        raise InterceptorError(
            502,
            "provider_not_configured",
            f"Provider {access.provider!r} is not configured on this server.",
        )
    return upstream


interceptor = Interceptor()
