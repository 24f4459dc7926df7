"""The runner's HTTP: its clients to task apps, and its look at our own interceptor."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
from django.conf import settings

from traces import tokens

# How long a look at the interceptor is trusted, and how long the look may take.
PROBE_TTL_S = 1.0
PROBE_TIMEOUT_S = 3.0


class ClientPool:
    """Several small httpx clients instead of one with a large pool: httpcore scans every
    connection of its pool on each request, which made one client with hundreds of
    connections the worker's bottleneck. A rollout uses the least busy client, so no client
    ever has more than `per_client` requests and none waits for a connection."""

    def __init__(self, *, size: int, per_client: int = 8):
        timeout = httpx.Timeout(None, connect=settings.EVALHUB_TASK_APP_CONNECT_TIMEOUT_S)
        limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        count = max(1, -(-size // per_client))
        self.clients = [httpx.AsyncClient(timeout=timeout, limits=limits) for _ in range(count)]
        self.busy = [0] * count

    async def __aenter__(self) -> ClientPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients), return_exceptions=True)

    @contextlib.asynccontextmanager
    async def lease(self):
        index = min(range(len(self.clients)), key=self.busy.__getitem__)
        self.busy[index] += 1
        try:
            yield self.clients[index]
        finally:
            self.busy[index] -= 1


class InterceptorProbe:
    """Is our own interceptor answering, and since when? A rollout that failed while it was
    down, or across its restart, failed because of us (a web process restarting), whatever the
    task app answered. Any HTTP answer but a gateway's 502-504 means it is up; its
    `tokens.STARTED_HEADER` says when its process started. Trusted for PROBE_TTL_S."""

    def __init__(self, client: httpx.AsyncClient):
        self.client = client
        self.url = tokens.interceptor_root_url()
        self.checked_at = -PROBE_TTL_S
        self.up = True
        self.started_at = 0.0

    async def lost_since(self, since: float) -> bool:
        """Was the interceptor down, or restarted, after `since` (Unix seconds)?"""
        return not await self.reachable() or self.started_at > since

    async def reachable(self) -> bool:
        if time.monotonic() - self.checked_at < PROBE_TTL_S:
            return self.up
        try:
            resp = await self.client.get(self.url, timeout=PROBE_TIMEOUT_S)
            self.up = resp.status_code not in (502, 503, 504)
            with contextlib.suppress(ValueError):
                self.started_at = float(resp.headers.get(tokens.STARTED_HEADER) or 0)
        except httpx.HTTPError:
            self.up = False
        self.checked_at = time.monotonic()
        return self.up
