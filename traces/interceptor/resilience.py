"""Riding out a provider's bad moments, before any byte reached the caller.

- Retries: a 408/409/429/5xx answer (529: Anthropic's "overloaded") or a failed connection is
  tried again up to the provider's `max_retries` (default 2) times, after the provider's
  `retry-after`/`retry-after-ms` when it gives one (up to 60 s; a longer wait is handed to the
  caller), else after a jittered exponential backoff. Each try has its row written ahead before
  it is sent (`ahead`); a failed one is completed as an `LLMCall` of its own (http_status,
  error, nothing billed), the next try written ahead anew; only the answer is billed.
- Fallback: when every try failed, the provider's `fallback` provider (same kind) gets the call.
- Queueing: a provider's `rpm` (calls) and `tpm` (tokens: the request's size at ~4 characters a
  token plus its output cap, an estimate) a minute, per web process, handed out evenly (a
  second's worth at a time): a call over either waits its turn instead of being refused.
The caller sees one answer: the successful one, or the last failure.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from evalhub.providers import DEFAULT_MAX_RETRIES
from traces.calls.recording import CallRecord
from traces.calls.usage import CHARS_PER_TOKEN
from traces.interceptor.clients import (
    NOT_SENT_ERRORS,
    UPSTREAM_ERRORS,
    UpstreamClient,
    UpstreamResponse,
)
from traces.interceptor.routes import Route, upstream_headers, upstream_of
from traces.models import RETRIED_MARK
from traces.redaction import server_redactor

# 429, 5xx, 529 (Anthropic's "overloaded"), and 408/409 as OpenAI's SDKs retry them.
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
MAX_RETRY_AFTER_S = 60.0
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
_OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class _Bucket:
    """Room for `per_minute` units a minute, handed out evenly: at most a second's worth at
    once. A unit costing more than a second's worth waits for a full bucket and leaves a debt."""

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.at = time.monotonic()

    async def take(self, units: float) -> None:
        need = min(units, self.capacity)
        while True:
            now = time.monotonic()
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now
            if self.level >= need:
                self.level -= units
                return
            await asyncio.sleep((need - self.level) / self.rate)


class RateLimits:
    """Per provider and web process: its `rpm` and `tpm` buckets."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], _Bucket] = {}

    async def acquire(self, upstream: dict[str, Any], tokens: int) -> None:
        for field, units in (("rpm", 1), ("tpm", tokens)):
            per_minute = upstream.get(field)
            if per_minute:
                key = (upstream.get("name", ""), field)
                bucket = self._buckets.get(key) or self._buckets.setdefault(
                    key, _Bucket(per_minute)
                )
                await bucket.take(units)


def tokens_estimate(request: dict[str, Any], body: bytes) -> int:
    cap = next((request[k] for k in _OUTPUT_CAPS if isinstance(request.get(k), int)), 0)
    return len(body) // CHARS_PER_TOKEN + cap


def retry_wait(resp: UpstreamResponse | None, try_: int) -> float | None:
    """Seconds to wait before the next try; None when the provider asks for longer than
    MAX_RETRY_AFTER_S (or says not to retry): the caller gets this answer."""
    if resp is not None:
        if resp.headers.get("x-should-retry") == "false":
            return None
        asked = _seconds(resp.headers.get("retry-after-ms"), 1000)
        if asked is None:
            asked = _seconds(resp.headers.get("retry-after"), 1)
        if asked is not None:
            return asked if asked <= MAX_RETRY_AFTER_S else None
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**try_) * random.uniform(0.5, 1.0)


def _seconds(value: str | None, per_second: int) -> float | None:
    try:
        seconds = float(value) / per_second if value else None
    except ValueError:  # an HTTP date: back off on our own
        return None
    return seconds if seconds is not None and seconds >= 0 else None


class Opener:
    """Opens the provider's answer to one call, with retries, queueing and fallback."""

    def __init__(self, client: UpstreamClient, limits: RateLimits, submit: Callable,
                 ahead: Callable[[CallRecord], Awaitable[None]]):  # fmt: skip
        self.client, self.limits, self.submit, self.ahead = client, limits, submit, ahead

    async def open(self, record: CallRecord, route: Route, upstream: dict, body: bytes,
                   scope_headers) -> UpstreamResponse:  # fmt: skip
        """The response to relay (an answer, or the last failure); raises the last
        of UPSTREAM_ERRORS when the last try could not reach its provider."""
        chain = [upstream]
        if upstream.get("fallback"):
            chain.append(upstream_of(upstream["fallback"]))
        tokens = tokens_estimate(record.request, body) if any(u.get("tpm") for u in chain) else 0
        for i, up in enumerate(chain):
            tries = up.get("max_retries", DEFAULT_MAX_RETRIES) + 1
            last_provider = i == len(chain) - 1
            for try_ in range(tries):
                last = last_provider and try_ == tries - 1
                await self.limits.acquire(up, tokens)
                record.provider, record.price_provider = (
                    up.get("name", record.provider),
                    up.get("price_provider"),
                )
                resp, wait = await self._try(
                    record, route, up, body, scope_headers, try_, (last, last_provider)
                )
                if resp is not None:
                    return resp
                if wait is None:
                    break  # the provider asked for a longer wait than we give: the fallback
                if try_ < tries - 1:
                    await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last try returns or raises")

    async def _try(self, record, route, up, body, scope_headers, try_, lasts):
        """(the response to relay, None) or (None, seconds to wait) after a failed try."""
        last, last_provider = lasts
        url = f"{up['base_url']}{route.path}"
        headers = upstream_headers(up, scope_headers)
        if record.row_id is None:  # its row exists before the provider sees the call
            await self.ahead(record)
        started = time.perf_counter()
        try:
            resp = await self.client.request("POST", url, headers=headers, body=body)
        except NOT_SENT_ERRORS as exc:
            # Only a call that never reached the provider is tried again: one that timed out
            # waiting for its answer may be generating (and billed) still.
            if last:
                raise
            error = f"upstream_unreachable ({type(exc).__name__}), {RETRIED_MARK}"
            self._failed(record, started, None, error)
            return None, retry_wait(None, try_)
        if resp.status_code not in RETRY_STATUSES or last:
            return resp, None
        wait = retry_wait(resp, try_)
        if wait is None and last_provider:
            return resp, None
        try:
            data = await resp.aread()
        except UPSTREAM_ERRORS:
            data = b""
        finally:
            await resp.aclose()
        excerpt = server_redactor().raw(data)[:2000].decode("utf-8", "replace")
        self._failed(record, started, resp.status_code, f"upstream answered {resp.status_code}, "
                     f"{RETRIED_MARK}: {excerpt}")  # fmt: skip
        return None, wait

    def _failed(self, record: CallRecord, started: float, status: int | None, error: str):
        """Complete the failed try's row; the next try is written ahead as a row of its own."""
        self.submit(
            replace(
                record,
                response_body=b"",
                response_is_sse=False,
                http_status=status or 502,
                error=error,
                latency_ms=(time.perf_counter() - started) * 1000,
            )
        )
        record.row_id = None
