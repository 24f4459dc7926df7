"""One reader of job events for every event stream of a web process (jobs/api/sse.py).

A stream holds no database connection: it waits on the process's poller, which every POLL_S
reads, for all the jobs some stream waits on, each job's status and last event in one query
(and the new events of the jobs that have some, one query per such job), then hands each
waiting stream what follows its last event. The reads run in one thread of the poller's own,
whose connection is closed after each read: with any number of streams open a web process
uses at most one connection for them, and none once they are gone.

Opening a stream (its key or session, its job) reads the database in the request's own
thread; `opening()` lets at most OPENING of them do so at once, and the stream view closes
that connection before it streams, so a burst of clients cannot take every connection
PostgreSQL has.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import logging
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.db import DatabaseError, connection
from django.db.models import OuterRef, Subquery

from jobs.models import TERMINAL_JOB_STATUSES, EvalJob, JobEvent

log = logging.getLogger(__name__)

POLL_S = 0.5
PAGE = 500
# Streams of one web process reading the database to open at once.
OPENING = 4

# The poller's thread (one per process, shared by the pollers of its event loops).
_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalhub-sse-poll")


@dataclass(frozen=True)
class Found:
    """What a read found of one job: is it over, its last event's seq, events after the
    lowest seq waited for (at most PAGE, in order)."""

    terminal: bool
    last_seq: int
    events: list[JobEvent] = field(default_factory=list)


def events_read(wanted: dict[str, int]) -> dict[str, Found]:
    """For each job id, what follows the seq given; a job that is not there is absent. The
    status and the last seq are read in one statement, so a terminal status comes with its
    event (both are written in one transaction). Closes the thread's connection."""
    try:
        last = JobEvent.objects.filter(job_id=OuterRef("pk")).order_by("-seq").values("seq")[:1]
        rows = (
            EvalJob.objects.filter(pk__in=list(wanted))
            .annotate(last_seq=Subquery(last))
            .values_list("pk", "status", "last_seq")
        )
        found = {}
        for job_id, status, last_seq in rows:
            events = []
            if last_seq is not None and last_seq > wanted[job_id]:
                after = JobEvent.objects.filter(job_id=job_id, seq__gt=wanted[job_id])
                events = list(after.order_by("seq")[:PAGE])
            found[job_id] = Found(status in TERMINAL_JOB_STATUSES, last_seq or 0, events)
        return found
    finally:
        connection.close()


@dataclass(eq=False)
class _Waiter:
    seq: int
    future: asyncio.Future


class EventPoller:
    """The poller of one event loop (`poller()`)."""

    def __init__(self) -> None:
        self.waiting: dict[str, list[_Waiter]] = {}
        self.known_last: dict[str, int] = {}
        self.opening = asyncio.Semaphore(OPENING)
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def wait(self, job_id: str, seq: int, timeout: float) -> tuple[bool, list[JobEvent]]:
        """(is the job over with nothing after what is returned, the events after `seq`)
        as soon as there are any or the job is over; (False, []) after `timeout` seconds."""
        waiter = _Waiter(seq, asyncio.get_running_loop().create_future())
        new = job_id not in self.waiting and job_id not in self.known_last
        self.waiting.setdefault(job_id, []).append(waiter)
        if new or seq < self.known_last.get(job_id, seq):
            self._kick.set()  # there is something to read now: do not wait for the next poll
        self._start()
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            return False, []
        finally:
            self._forget(job_id, waiter)

    def _forget(self, job_id: str, waiter: _Waiter) -> None:
        waiters = self.waiting.get(job_id, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self.waiting.pop(job_id, None)
            self.known_last.pop(job_id, None)

    def _start(self) -> None:
        if self._task is None or self._task.done():
            # A context of its own: not the request's that happened to start it.
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._run(), context=contextvars.Context())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.waiting:
            self._kick.clear()
            wanted = {job_id: min(w.seq for w in ws) for job_id, ws in self.waiting.items()}
            try:
                found = await loop.run_in_executor(_thread, events_read, wanted)
            except DatabaseError:  # the streams wait on; the next poll tries again
                log.warning("event streams could not read the database", exc_info=True)
            except Exception:  # never let one bad read stop every stream of the process
                log.exception("event streams' read failed")
            else:
                self._deliver(wanted, found)
            try:
                await asyncio.wait_for(self._kick.wait(), POLL_S)
            except TimeoutError:
                pass

    def _deliver(self, wanted: dict[str, int], found: dict[str, Found]) -> None:
        for job_id in wanted:
            # A job that is gone is over, with nothing more to send.
            got = found.get(job_id, Found(terminal=True, last_seq=0))
            self.known_last[job_id] = got.last_seq
            seqs = [e.seq for e in got.events]
            read_to = seqs[-1] if seqs else wanted[job_id]
            for waiter in list(self.waiting.get(job_id, [])):
                if waiter.future.done():
                    continue
                mine = got.events[bisect.bisect_right(seqs, waiter.seq) :]
                # Over for this stream only once it has everything up to the last event.
                over = got.terminal and max(read_to, waiter.seq) >= got.last_seq
                if mine or over:
                    waiter.future.set_result((over, mine))


_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EventPoller] = (
    weakref.WeakKeyDictionary()
)


def poller() -> EventPoller:
    """The running event loop's poller (a web process has one loop; tests run several)."""
    loop = asyncio.get_running_loop()
    found = _pollers.get(loop)
    if found is None:
        found = _pollers[loop] = EventPoller()
    return found
