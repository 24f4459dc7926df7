"""Many small calls made as one: what arrives while a call runs goes in the next.

The runner writes through one database thread. With dozens of rollouts in flight, their results
arrive faster than it writes them one transaction at a time; a `Batcher` writes every result
that came in meanwhile in one (group commit). Nothing waits for company: a lone item is written
at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Batcher:
    """`await batcher(item)` is `call([item])[0]`, but the items of concurrent callers share a
    call. When a shared call raises, each of its items is tried alone, so one bad item fails
    only its own caller."""

    def __init__(self, call: Callable[[list], Awaitable[list]]):
        self._call = call
        self._waiting: list[tuple[Any, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def __call__(self, item: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return await future

    def waiting(self) -> list[Any]:
        """The items waiting for the next call: a copy, safe to take from another thread
        while a call runs (the call in progress is the only one, so they all go in the next)."""
        return [item for item, _ in list(self._waiting)]

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._run(batch)
        finally:
            self._flusher = None

    async def _run(self, batch: list[tuple[Any, asyncio.Future]]) -> None:
        try:
            results = await self._call([item for item, _ in batch])
        except Exception as exc:
            if len(batch) > 1:
                for one in batch:
                    await self._run([one])
            elif not batch[0][1].done():
                batch[0][1].set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():  # its caller may have been cancelled meanwhile
                future.set_result(result)
