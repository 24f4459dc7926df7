"""The runner's batches: concurrent items share a call, a lone one goes at once, a bad one
fails alone."""

from __future__ import annotations

import asyncio

import pytest

from jobs.worker.batching import Batcher


class Doubler:
    def __init__(self):
        self.calls: list[list[int]] = []

    async def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(list(items))
        await asyncio.sleep(0.01)
        if any(item < 0 for item in items):
            raise ValueError(f"negative item in {items}")
        return [item * 2 for item in items]


def test_items_arriving_while_a_call_runs_share_the_next_call():
    double = Doubler()

    async def main():
        batcher = Batcher(double)
        first = asyncio.create_task(batcher(1))
        await asyncio.sleep(0)  # the first call is under way
        rest = await asyncio.gather(*(batcher(n) for n in range(2, 6)))
        return [await first, *rest]

    assert asyncio.run(main()) == [2, 4, 6, 8, 10]
    assert double.calls == [[1], [2, 3, 4, 5]]


def test_a_bad_item_fails_only_its_own_caller():
    double = Doubler()

    async def main():
        batcher = Batcher(double)
        return await asyncio.gather(*(batcher(n) for n in (1, -1, 3)), return_exceptions=True)

    first, bad, third = asyncio.run(main())
    assert (first, third) == (2, 6)
    assert isinstance(bad, ValueError) and "[-1]" in str(bad)
    # Tried together, then each alone.
    assert double.calls == [[1, -1, 3], [1], [-1], [3]]


def test_a_cancelled_caller_does_not_stop_the_others():
    double = Doubler()

    async def main():
        batcher = Batcher(double)
        tasks = [asyncio.create_task(batcher(n)) for n in (1, 2, 3)]
        await asyncio.sleep(0)
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, cancelled, third = asyncio.run(main())
    assert (first, third) == (2, 6)
    assert isinstance(cancelled, asyncio.CancelledError)


@pytest.mark.parametrize("count", [1, 7])
def test_every_caller_gets_its_own_result(count):
    async def main():
        batcher = Batcher(Doubler())
        return await asyncio.gather(*(batcher(n) for n in range(count)))

    assert asyncio.run(main()) == [n * 2 for n in range(count)]
