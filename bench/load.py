"""A light load generator for `bench/bench_interceptor.py`'s saturation figure: `calls` chat
completions POSTed at `url` by `concurrency` callers over aiohttp's pooled client on uvloop, in a
process of its own (the measuring process's own client, httpx, costs more CPU per call than the
proxies it measures: it cannot saturate one). Prints the seconds they took.

    python bench/load.py URL CALLS CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp
import uvloop
from bench_interceptor import MESSAGES  # this script's folder is on sys.path

BODY = json.dumps({"model": "gpt-4o-mini", "max_tokens": 64, "messages": MESSAGES}).encode()
HEADERS = {"content-type": "application/json"}


async def load(url: str, calls: int, concurrency: int) -> float:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        left = calls

        async def caller() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(url, data=BODY, headers=HEADERS) as resp:
                    body = await resp.read()
                    if resp.status != 200:  # what the proxy said (the URL holds its key)
                        raise SystemExit(f"answered {resp.status}: {body[:500]!r}")

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return time.perf_counter() - started


if __name__ == "__main__":
    url, calls, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(f"{uvloop.run(load(url, calls, concurrency)):.6f}")
