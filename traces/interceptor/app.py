"""The interceptor's ASGI app: routes a call, refuses what must not reach the provider,
forwards the rest (each try's row written ahead first, `CallWriter.ahead`) and hands the
record to the writer, which completes that row."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from evalhub import jsonvalues, metrics
from traces.calls import recording as services
from traces.interceptor.access import TokenCache
from traces.interceptor.asgi import pass_headers, read_body, send_json
from traces.interceptor.budgets import Budgets
from traces.interceptor.clients import UPSTREAM_ERRORS, UpstreamClient
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import (
    InterceptorError,
    error_body,
    is_openai_error,
    upstream_failure,
)
from traces.interceptor.limits import RolloutLimits
from traces.interceptor.relay import forward, with_usage_asked
from traces.interceptor.replaying import Replays
from traces.interceptor.resilience import Opener, RateLimits
from traces.interceptor.routes import (
    ROUTE_LIST,
    ROUTES,
    Route,
    choose,
    upstream_headers,
    upstream_of,
)
from traces.interceptor.writer import CallWriter
from traces.models import CallKind, ReplayMark
from traces.otel.context import traceparent_of
from traces.redaction import RedactingFilter, server_redactor
from traces.results import selectors
from traces.tokens import INTERCEPTOR_PATH, STARTED_HEADER


class Interceptor:
    """Holds no process-wide state until `startup()`; the ASGI lifespan calls it."""

    def __init__(self) -> None:
        self.started: list[tuple[bytes, bytes]] = []
        db = DbThreads()
        self.tokens = TokenCache(db)
        self.budgets = Budgets(db)
        self.limits = RolloutLimits(db)
        self.client = UpstreamClient()
        self.rates = RateLimits()
        self.writer = CallWriter(on_built=self._count)
        self.replays = Replays(db, self.submit)

    def _count(self, records, calls) -> None:
        self.budgets.count(records, calls)
        self.limits.count(records, calls)

    def submit(self, record: services.CallRecord) -> None:
        answered_by = ("recording" if record.replayed is not None
                       else "provider" if record.forwarded else "evalhub")  # fmt: skip
        metrics.llm_call_count(provider=record.provider, model=record.request.get("model"),
                               status=record.http_status, answered_by=answered_by)  # fmt: skip
        self.limits.submitted(record)
        self.writer.submit(record)

    def startup(self) -> None:
        # The writer thread's batches hold the GIL for up to the switch interval (5 ms by
        # default) while a call waits on the event loop; 1 ms keeps that wait off the p99.
        sys.setswitchinterval(0.001)
        # uvicorn's loggers print request paths, which carry tokens.
        for name in ("uvicorn.access", "uvicorn.error"):
            logging.getLogger(name).addFilter(RedactingFilter())
        # Ended attempts pushed by the workers close their URLs at once (access.py).
        self.tokens.listen()
        # When it began to answer (uvicorn listens right after the lifespan's start-up), not
        # when the process began: a rollout started while Django was still setting up met it
        # down, and the workers' probe must say so (jobs/worker/clients.py).
        self.started = [(STARTED_HEADER.encode(), f"{time.time():.3f}".encode())]

    async def aclose(self) -> None:
        self.tokens.close()
        await self.client.aclose()
        await asyncio.get_running_loop().run_in_executor(None, self.writer.flush)

    async def __call__(self, scope, receive, send) -> None:
        path: str = scope["path"]
        rest = path[len(INTERCEPTOR_PATH) :] if path.startswith(INTERCEPTOR_PATH) else ""
        token, _, tail = rest.partition("/")
        route = ROUTES.get(tail.rstrip("/"))
        try:
            if not token or route is None:
                raise InterceptorError(404, "not_found", f"Use <inference_url>{ROUTE_LIST}.")
            if scope["method"] != route.method:
                raise InterceptorError(405, "method_not_allowed", f"Use {route.method}.")
            if route.name == "models":
                await self._models(token, send)
            else:
                await self._call(scope, token, route, receive, send)
        except InterceptorError as exc:
            anthropic = route is not None and route.kind == "anthropic"
            headers = self.started if not token else None  # the root: the workers' probe
            await send_json(
                send, exc.status, exc.body(anthropic=anthropic), headers=headers, retry=False
            )

    async def _models(self, token: str, send) -> None:
        access = await self.tokens.access(token)
        upstream = upstream_of(access.provider)
        try:
            models = "/v1/models" if upstream.get("kind") == "anthropic" else "/models"
            resp = await self.client.request(
                "GET", f"{upstream['base_url']}{models}", headers=upstream_headers(upstream, [])
            )
            try:
                content = await resp.aread()
            finally:
                await resp.aclose()
        except UPSTREAM_ERRORS as exc:
            raise upstream_failure(exc) from exc
        body = server_redactor().raw(content)
        if resp.status_code >= 400 and not is_openai_error(body):
            body = error_body(f"The provider answered {resp.status_code}.", "upstream_error")
        await send_json(send, resp.status_code, body, headers=pass_headers(resp))

    async def _call(self, scope, token: str, route: Route, receive, send) -> None:
        t0 = time.perf_counter()
        started_at = datetime.now(UTC)
        access = await self.tokens.access(token)
        await self.budgets.track(access)
        await self.limits.track(access)
        body = await read_body(scope, receive, settings.EVALHUB_MAX_REQUEST_BYTES)
        request = _request(body)
        record = _record(access, route, request, started_at)
        record.traceparent = traceparent_of(scope["headers"])
        try:
            upstream, model = choose(access, route, request.get("model"))
            self.budgets.check(access)
            await self.limits.check(access)
        except InterceptorError as exc:
            _refused(record, exc)
            self.submit(record)
            raise
        if model is not None:  # an alias: the provider gets the model it stands for
            record.request = {**request, "model": model}
            body = json.dumps(record.request).encode()
        # A replay's call (its policy's, or its judge's, and a re-judgement's judge's):
        # answered from its recording unless it misses; a policy call from the job's cache
        # (docs/replay.md).
        if access.replay_on_miss or (access.cache and access.kind == CallKind.POLICY):
            if await self.replays.answered(access, route, record, send, t0):
                return
        strip_usage = False
        if route.asks_usage:
            body, strip_usage = with_usage_asked(record, body)

        async def ahead(record: services.CallRecord) -> None:
            # Each try's row first; then a last look, as it goes out, at whether the rollout
            # ended while the call waited (an end pushed meanwhile keeps it from the provider).
            await self.writer.ahead(record)
            self.tokens.still_open(access)

        opener = Opener(self.client, self.rates, self.submit, ahead)
        try:
            await forward(
                record,
                lambda: opener.open(record, route, upstream, body, scope["headers"]),
                receive, send, t0, strip_usage,
            )  # fmt: skip
        except InterceptorError as exc:  # not written ahead, or ended meanwhile: not forwarded
            _refused(record, exc)
            raise
        except Exception as exc:
            record.error = record.error or f"internal_error: {type(exc).__name__}"
            raise
        finally:
            record.latency_ms = (time.perf_counter() - t0) * 1000
            self.submit(record)


def _refused(record: services.CallRecord, exc: InterceptorError) -> None:
    """The call did not reach a provider: the interceptor refused it."""
    record.forwarded = False
    if record.replay == ReplayMark.LIVE:  # a replay's miss that never went out
        record.replay = ReplayMark.REFUSED
    record.http_status = exc.status
    record.error = f"{exc.type}: {exc.message}"
    record.refusal = exc.refusal


def _request(body: bytes) -> dict[str, Any]:
    try:
        request = jsonvalues.loads(body)
    except (ValueError, RecursionError):
        request = None
    if not isinstance(request, dict):
        raise InterceptorError(400, "invalid_request_error", "The body must be a JSON object.")
    return request


def _record(access: selectors.AttemptAccess, route: Route, request: dict,
            started_at) -> services.CallRecord:  # fmt: skip
    upstream = settings.EVALHUB_UPSTREAMS.get(access.provider) or {}
    return services.CallRecord(
        attempt_id=access.attempt_id,
        job_id=access.job_id,
        provider=access.provider,
        price_provider=upstream.get("price_provider"),
        request=request,
        started_at=started_at,
        stream=bool(request.get("stream")),
        route=route.name,
        kind=access.kind,
    )


interceptor = Interceptor()
