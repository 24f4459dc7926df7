"""A worker process's budget of bytes for task-app answers in flight.

Each answer the worker reads is at most EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES, but a worker runs
many rollouts at once (every runner thread, up to `max_concurrent` each): thirty answers of
15 MiB arriving together took a worker past 1 GB. So every answer draws from one budget per
process, EVALHUB_WORKER_ANSWER_BUDGET_BYTES, from the moment it is read until its result is
written to the database:

- an answer is charged `COST_FACTOR` times its size: its bytes as read (then the JSON text kept
  for the database in their place, `jobs.worker.taskapp`), and the copies the database driver
  makes of that text as a group commit writes it (psycopg encodes it, and libpq buffers the
  statements of the group together: with twice, 30 answers of 15 MiB on PostgreSQL went 130
  MiB past the budget). The decoded answer is never held across an `await`: a thread builds
  it, checks it and turns it into text at once, so at most one per thread lives at a time,
  outside the budget;
- an answer under `SMALL_BYTES` never waits: it is counted (two integer operations under a
  lock) so that big answers see it, and may take the budget past its total;
- a bigger answer waits, first come first served, until its share is free. Its socket is not
  read meanwhile: aiohttp stops reading the connection once its buffer holds 64 KiB, and the
  task app's send waits. An answer larger than the whole budget is charged the whole budget:
  it goes alone once nothing else is held, so nothing waits forever.

The wait is the worker's, not the task app's: the rollout's timeout stops while it waits and
goes on after, and the seed's latency leaves the wait out.

What a worker holds at its peak is then about its size at rest, plus the budget, plus one
answer being decoded per runner thread (about four times its bytes, briefly) and the
allocator's slack; glibc is told to give big blocks back at once and trimmed after each big
answer (`answer_budget`, `memory_trim`).

Runner threads each have an event loop of their own: the budget is guarded by a thread lock and
wakes a waiter in its own loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.conf import settings

log = logging.getLogger(__name__)

SMALL_BYTES = 1024 * 1024
COST_FACTOR = 3
# mallopt's parameter (glibc's malloc.h).
M_MMAP_THRESHOLD = -3


def answer_cost(size: int) -> int:
    """What an answer of `size` bytes is charged."""
    return COST_FACTOR * size


@dataclass(eq=False)
class _Waiter:
    nbytes: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    granted: bool = field(default=False)


class AnswerBudget:
    def __init__(self, total: int):
        self.total = total
        self.used = 0
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    def take_now(self, nbytes: int) -> None:
        """Count `nbytes` without waiting (a small answer, or a held answer that grew)."""
        with self._lock:
            self.used += nbytes

    async def take(self, nbytes: int) -> int:
        """Wait for `nbytes` (at most the whole budget) to be free, first come first served;
        what was taken."""
        nbytes = min(nbytes, self.total)
        with self._lock:
            if not self._waiters and self.used + nbytes <= self.total:
                self.used += nbytes
                return nbytes
            loop = asyncio.get_running_loop()
            waiter = _Waiter(nbytes, loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if not waiter.granted:
                    self._waiters.remove(waiter)
                    self._grant()  # the next in line may fit now
                    raise
            self.give_back(nbytes)
            raise
        return nbytes

    def give_back(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes
            self._grant()

    def _grant(self) -> None:
        """Wake the waiters at the head of the line whose share is free (lock held)."""
        while self._waiters and self.used + self._waiters[0].nbytes <= self.total:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self.used += waiter.nbytes
            waiter.loop.call_soon_threadsafe(_wake, waiter.future)


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


@functools.cache
def answer_budget() -> AnswerBudget:
    """The process's budget; glibc's malloc told to map blocks of SMALL_BYTES or more on their
    own, given back to the system when freed. By default it raises that threshold to the
    largest block freed so far (up to 32 MiB), so every big answer after the first was carved
    from heaps that keep what is freed: 30 MiB more at the peak in the test of 30 answers."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, SMALL_BYTES)
    return AnswerBudget(settings.EVALHUB_WORKER_ANSWER_BUDGET_BYTES)


class AnswerHold:
    """What one rollout's answer holds of the budget, from reading to written; `release()` at
    the end (any number of times). `deadline` is the rollout's timeout, pushed back by waits."""

    def __init__(self, budget: AnswerBudget | None = None, deadline: asyncio.Timeout | None = None):
        self.budget = budget or answer_budget()
        self.deadline = deadline
        self.nbytes = 0
        self.waited_s = 0.0

    async def take(self, size: int) -> None:
        """Hold what an answer of `size` bytes costs, waiting for it unless it is small."""
        cost = answer_cost(size)
        if size < SMALL_BYTES:
            self.resize(self.nbytes + cost)
            return
        # The rollout's deadline stops while it waits (a long line must not time it out),
        # then goes on from where it was.
        due = None if self.deadline is None else self.deadline.when()
        if due is not None:
            self.deadline.reschedule(None)
        started = time.monotonic()
        try:
            self.nbytes += await self.budget.take(cost)
        finally:
            waited = time.monotonic() - started
            self.waited_s += waited
            if due is not None:
                self.deadline.reschedule(due + waited)

    def resize(self, nbytes: int) -> None:
        """Hold `nbytes` from now on, never waiting (what was read is in memory already)."""
        change, self.nbytes = nbytes - self.nbytes, nbytes
        if change > 0:
            self.budget.take_now(change)
        elif change < 0:
            self.budget.give_back(-change)

    def release(self) -> None:
        big = self.nbytes >= answer_cost(SMALL_BYTES)
        self.resize(0)
        if big:
            memory_trim()


@functools.cache
def _libc():
    """glibc, or None on another C library (nothing to tune there)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def memory_trim() -> None:
    """Give back to the system what the heaps hold free once a big answer is written: the
    strings of its decoded form came from them. Without it a worker kept 377 MiB after the
    test of 30 answers of 15 MiB, with it 176 MiB (134 MiB at start). It takes under 20 ms
    when there is much to give back, 0.1 ms when there is not."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
