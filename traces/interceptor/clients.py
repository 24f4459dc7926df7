"""The pooled HTTP client to the providers, split in shards taken in turn.

httpcore checks every connection of a pool (a poll() per idle socket) on each request and each
response close, so with dozens of connections in flight that bookkeeping outweighed the
forwarding itself; a few smaller pools keep it short (8 shards took the CPU per call at 32
callers from 1.5 to 1.2 ms)."""

from __future__ import annotations

import httpx
from django.conf import settings

SHARDS = 8


class ClientShards:
    def __init__(self) -> None:
        self._clients: list[httpx.AsyncClient] | None = None
        self._next = 0

    def next(self) -> httpx.AsyncClient:
        if self._clients is None:
            self._clients = [_client() for _ in range(SHARDS)]
        self._next = (self._next + 1) % SHARDS
        return self._clients[self._next]

    async def aclose(self) -> None:
        clients, self._clients = self._clients or [], None
        for client in clients:
            await client.aclose()


def _client() -> httpx.AsyncClient:
    per_shard = max(1, settings.EVALHUB_INTERCEPTOR_MAX_CONNECTIONS // SHARDS)
    return httpx.AsyncClient(
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
