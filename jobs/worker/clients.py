"""The runner's HTTP: its clients to task apps, and its look at our own interceptor."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import time

import aiohttp
import anyio
import httpx
from django.conf import settings

from traces import tokens

# How long a look at the interceptor is trusted, and how long the look may take.
PROBE_TTL_S = 1.0
PROBE_TIMEOUT_S = 3.0
# A rollout that began this soon before the interceptor began to answer may have met it down
# (the socket is bound just after the start time is taken, and the header is rounded).
RESTART_GRACE_S = 1.0


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The process's one TLS context, for every client it makes: each client making its own loads
    the CA bundle again, 20 ms of CPU, which made starting a runner of 256 rollouts cost a second."""
    return httpx.create_ssl_context()


def warm() -> None:
    """Build what a process's first runner would: the TLS context and the modules of httpx's
    transport (httpcore, h11, h2), 80-90 ms of CPU, and anyio's asyncio backend, which
    httpcore loads on its first request (the first job's probe of its task app took 14 ms
    instead of half of one). Each worker lending a hand to a job paid it as its runner started,
    a second late at a tenth of a CPU; a worker builds it as it starts (`jobs.tasks`), before
    its heap is frozen (`evalhub.heap`)."""
    httpx.AsyncHTTPTransport(verify=ssl_context())
    anyio.run(anyio.sleep, 0)


class ClientPool:
    """The runner's clients to task apps. Synth rollouts go through one aiohttp session: its
    client takes less than half the CPU per request of httpx's, which was the worker's largest
    cost. The environment adapters and the probes use httpx, through several small clients
    rather than one with a large pool (httpcore scans every connection of its pool on each
    request): a lease takes the least busy one, so none has more than `per_client` requests
    and none waits for a connection."""

    def __init__(self, *, size: int, per_client: int = 8):
        self.connect_timeout_s = settings.EVALHUB_TASK_APP_CONNECT_TIMEOUT_S
        timeout = httpx.Timeout(None, connect=self.connect_timeout_s)
        limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        count = max(1, -(-size // per_client))
        self.clients = [
            httpx.AsyncClient(timeout=timeout, limits=limits, verify=ssl_context())
            for _ in range(count)
        ]
        self.busy = [0] * count
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ClientPool:
        # Made here, in the event loop that uses it; at most one connection per rollout.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        closing = [c.aclose() for c in self.clients]
        if self.session is not None:
            closing.append(self.session.close())
        await asyncio.gather(*closing, return_exceptions=True)

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
        return not await self.reachable() or self.started_at + RESTART_GRACE_S > since

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
