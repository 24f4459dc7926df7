"""The HTTP client to the providers: one pooled aiohttp session per web process.

aiohttp's client, not httpx: forwarding the same call through a bare ASGI proxy costs well
under half the CPU with aiohttp (`bench/bare_proxy.py --client aiohttp` against the httpx
floor, in one `make bench` run); httpcore also checks every pooled connection on each request
and each close, which grows with the connections in flight. The rest of the project keeps httpx.

`UpstreamResponse` is the one view of a provider's answer the relay and the retries read.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from django.conf import settings

# What failing to reach, or to read, a provider raises.
UPSTREAM_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError)
# Failures that happen before the request left: safe to try again.
NOT_SENT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)


def is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, asyncio.TimeoutError)


class UpstreamResponse:
    """A provider's answer whose body has not been read yet. `waited_s`: the time spent
    waiting for the provider so far (its headers, then each read of its body), which is not
    the interceptor's own (evalhub.metrics' added latency)."""

    __slots__ = ("_resp", "status_code", "headers", "waited_s")

    def __init__(self, resp: aiohttp.ClientResponse, waited_s: float = 0.0):
        self._resp = resp
        self.status_code = resp.status
        self.headers = resp.headers
        self.waited_s = waited_s

    @property
    def raw_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        return self._resp.raw_headers

    async def aread(self) -> bytes:
        started = time.perf_counter()
        try:
            return await self._resp.read()
        finally:
            self.waited_s += time.perf_counter() - started

    async def aiter_bytes(self):
        """The body as it arrives (decoded if the provider compressed it)."""
        content = self._resp.content
        while True:
            started = time.perf_counter()
            chunk = await content.readany()
            self.waited_s += time.perf_counter() - started
            if not chunk:
                return
            yield chunk

    async def aclose(self) -> None:
        # A body read to its end leaves the connection to the pool; one left midway (the caller
        # hung up) closes it, which stops the generation the provider would bill.
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()


class UpstreamClient:
    """Made lazily, inside the event loop that uses it."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def request(
        self, method: str, url: str, *, headers: dict[str, str], body: bytes | None = None
    ) -> UpstreamResponse:
        started = time.perf_counter()
        resp = await self._open().request(
            method, url, data=body, headers=headers, allow_redirects=False
        )
        return UpstreamResponse(resp, time.perf_counter() - started)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            read = settings.EVALHUB_INTERCEPTOR_READ_TIMEOUT_S
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=settings.EVALHUB_INTERCEPTOR_MAX_CONNECTIONS,
                    limit_per_host=0,
                    keepalive_timeout=30.0,
                ),
                # `sock_read` bounds each wait for the provider's next bytes; `connect` the
                # wait for a pooled connection plus opening one.
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=read,
                    sock_connect=settings.EVALHUB_INTERCEPTOR_CONNECT_TIMEOUT_S,
                    sock_read=read,
                ),
                # A provider's cookies are never kept, nor sent with another rollout's call.
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
