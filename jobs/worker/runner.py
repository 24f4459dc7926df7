"""The worker loop: a job's leased work, rollouts and judgements, run in slices on Celery's queue.

A job is worked by ordinary `jobs.job_run` messages on the ordinary queue, each carrying only
the job's id (jobs/dispatch.py). The runner a message starts:

1. claims from the job's sources, rollouts then judgements, whenever an eighth of its slots
   is free, and a batch of results claims the slots it frees as it is written (and those of
   rollouts ended meanwhile; alone on the job, half `max_concurrent` more, to start as soon
   as the task app has room: `RolloutSource.ahead`); it holds at most EVALHUB_RUNNER_MAX_INFLIGHT,
   the claims the job's `max_concurrent` (and the judge's `concurrency`) over all workers;
2. when its first claim filled it and the job has more to claim, sends the job's message again,
   once per hand the rest keeps busy (`jobs.worker.here.hands_ask`; a worker alone takes it
   itself). A message that reaches a worker process already running the job joins the runner there
   (`jobs.worker.here`): its slots grow by EVALHUB_RUNNER_MAX_INFLIGHT (it asks for a hand again
   once they fill), where a second runner would have been a second event loop and database thread
   fighting the first for the process's one interpreter lock, each claiming in smaller batches.
   Only while its event loop keeps up: a runner whose process is the bound sends the hand back to
   the queue, once, for another worker, and asks again later;
3. renews its leases and looks at the job's status (a cancel aborts what it runs);
4. once EVALHUB_RUNNER_SLICE_S has passed and it has finished as much work as it has held at
   once (a turn of its slots, so long rollouts make long slices and short drains), and other
   messages wait in the queue, stops claiming, sends the job's message again to the back of the
   queue if the job has work left, and drains what it holds: jobs take turns on the workers.
   While nothing waits, its slice goes on: no hand-over costs a job that has the workers alone.

The runner that finds nothing open ends the job. One that finds the rest leased to other
runners leaves it to them (they send its message as their slices end); if they died with their
messages, Celery beat's `jobs.jobs_redispatch` hands the job out again once their heartbeats
stop (EVALHUB_WORKER_LOST_S). Django's ORM is synchronous: database calls run on the runner's
own threads (`db`, `db_results`), whose connections close as the runner ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connections

from evalhub.celery import DRAIN
from jobs import claims, services
from jobs.dispatch import job_dispatch, job_trace_members_dispatch, queue_waiting
from jobs.models import EvalJob, JobStatus
from jobs.worker.here import HERE, Hand, LoopLag, hands_ask
from jobs.worker.judging import JudgeSource
from jobs.worker.outages import through_outages
from jobs.worker.rollouts import RolloutSource
from traces.results.result_rows import job_summary

try:  # uvicorn[standard] installs it, but for Windows
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

log = logging.getLogger(__name__)

# How often the runner looks at the job's status (a cancel is noticed within this).
POLL_S = 0.5
# How often a runner with nothing in flight looks at what is left of the job while other
# workers hold it: another worker ending the job frees this runner's Celery thread within it.
IDLE_LOOK_S = 4 * POLL_S
# How soon a runner whose hand-over the broker did not take tries again (it works on meanwhile).
UNSENT_RETRY_S = 2.0
# How soon a runner that could not keep up with a hand asks for one again.
HAND_AGAIN_S = 2.0
# The shortest time between two requests for the zip's members of a running job.
MEMBERS_MIN_EVERY_S = 1.0


def job_run(*, job_id: str, passed: bool = False) -> None:
    """Entry point of the Celery task: one slice of work on the job (counted by the worker's
    watchdog, which lets a worker that lost its consumer drain its runners), in an event loop
    of uvloop's where it is installed: asyncio's own loop and transports, in Python, were a
    sixth of a busy worker's CPU (docs/performance.md). A hand reaching the process that
    runs the job goes back to the queue for the other workers, once (`passed`); then it
    joins the runner here, unless that runner keeps up no more (`jobs.worker.here`)."""
    with DRAIN.runner():
        hand = HERE.join(job_id, passed=passed)
        if hand is Hand.FIRST_ELSEWHERE:
            job_dispatch(job_id, passed=True)
        if hand is not Hand.ABSENT:
            return
        with asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None) as runner:
            runner.run(JobRunner(job_id=job_id).run())


class JobRunner:
    def __init__(self, *, job_id: str):
        self.job_id = job_id
        self._status = EvalJob.objects.filter(pk=job_id).values_list("status", flat=True)
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.lease_s = settings.EVALHUB_LEASE_S
        self.slice_s = settings.EVALHUB_RUNNER_SLICE_S
        self.cap = settings.EVALHUB_RUNNER_MAX_INFLIGHT
        self._db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalhub-db")
        self._results_thread = ThreadPoolExecutor(1, "evalhub-results")  # `db_results`
        self.rollouts: RolloutSource | None = None  # opened by `run`, first of its `sources`
        self.sources: list[RolloutSource | JudgeSource] = []
        self.in_flight: dict[tuple[str, int], asyncio.Task] = {}
        self.written: set[tuple[str, int]] = set()  # its slot free (`results_written`)
        self._changed = asyncio.Event()
        # Work started and finished this slice, and the most held at once: an idle runner
        # leaves the job to those that hold work (they send its message again).
        self.started = self.finished = self.held_most = 0
        # Whether a hand is asked for when a claim fills the slots and the job has more.
        self.ask_hand, self.hand_due = True, 0.0
        self.claiming = False  # hands may join (`jobs.worker.here`) while the loop keeps up
        self.reserved = 0  # slots a claim in progress may fill (`slots_reserve`)
        self.working = False  # its work loop runs: what it starts is drained or aborted
        self.lag = LoopLag()

    async def db(self, fn, /, **kwargs: Any) -> Any:
        return await self._in(self._db_thread, functools.partial(fn, **kwargs))

    async def db_results(self, fn, /, **kwargs: Any) -> Any:
        """`db`, on the results' own thread: a rollout's slot is free once its result is
        written, and at 256 in flight the claims and the batches of results, taking turns
        on one thread, each held the other's slots for tens of milliseconds."""
        return await self._in(self._results_thread, functools.partial(fn, **kwargs))

    async def _in(self, thread: ThreadPoolExecutor, call) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(thread, functools.partial(through_outages, call))

    async def run(self) -> None:
        try:
            job = await self.db(EvalJob.objects.filter(pk=self.job_id).first)
            if job is None or job.is_terminal:
                return
            self.job = job
            self.rollouts, judges = RolloutSource(self), JudgeSource(self)
            self.sources = [self.rollouts, judges]
            # Slots worth claiming for: the job's bound on rollouts and the judge's.
            self.cap_most = job.max_concurrent + judges.concurrency
            self.cap = min(self.cap, self.cap_most)
            self.loop = asyncio.get_running_loop()
            async with contextlib.AsyncExitStack() as stack:
                for source in self.sources:
                    if not await source.open(stack):
                        return
                lag = asyncio.create_task(self.lag.watch())
                HERE.add(self)
                self.working = True
                try:
                    await self._work()
                finally:
                    self.claiming = self.working = False
                    HERE.remove(self)
                    lag.cancel()
                    # However the work ended (a crash included), nothing it started outlives
                    # it: a rollout must not meet its client closed under it and write that
                    # as the task app's failure. What it held is taken over when its lease ends.
                    if stopped := await self._in_flight_cancel():
                        log.warning("job %s: runner ended with %d in flight", self.job_id, stopped)
        finally:
            await self.db(connections.close_all)
            await self.db_results(connections.close_all)
            self._db_thread.shutdown(wait=True)
            self._results_thread.shutdown(wait=True)

    async def _work(self) -> None:
        now = time.monotonic()
        slice_end = now + self.slice_s
        last_look = last_renew = last_claim = 0.0
        self.starved = False  # the last claim got less than it asked for
        handed_over, draining = False, False
        # The zip's members of the seeds that ended meanwhile are built as the job goes on.
        members_every = max(settings.EVALHUB_TRACES_ZIP_AFTER_S, MEMBERS_MIN_EVERY_S)
        members_at = now + members_every
        while True:
            # Cleared before looking, so work ending while we look wakes the wait below.
            self._changed.clear()
            now = time.monotonic()
            if now - last_renew >= self.lease_s / 3:
                await self._renew()
                last_renew = now
            if now - last_look >= POLL_S:
                last_look = now
                if await self.db(self._status.first) != JobStatus.RUNNING:
                    await self._abort_all()
                    return
            if now >= members_at:
                members_at = now + members_every
                await self._members_ask()
            if DRAIN.stopping.is_set() and not draining:
                # The worker lost its consumer (evalhub.celery): this slice ends now.
                draining, slice_end = True, now
            turned = draining or self.finished >= self.held_most
            if not handed_over and now >= slice_end and turned:
                ended = await self._slice_ended(draining=draining)
                if ended is None:
                    return
                handed_over, slice_end = ended[0], now + ended[1]
            self.claiming = not (handed_over or draining)
            if not handed_over and self._claim_due(now - last_claim):
                last_claim = now
                await self._claim_asking(now)
            if not self.in_flight:
                if handed_over:
                    # Drained. What it gave back (a retry) goes to the queue if nobody holds
                    # the job's work any more; while the broker takes no message, it goes on.
                    if await self._hand_over(held=False) is not False:
                        return
                    handed_over, slice_end = False, now + UNSENT_RETRY_S
                    continue
                left = await self.db(claims.job_left, job_id=self.job_id, worker=self.worker)
                if left.claim_in is None:
                    await self._finish()
                    return
                # A backoff, or others hold what is open: look again soon (its end, a stop).
                wait = min(left.claim_in, self.lease_s / 3, slice_end - now, IDLE_LOOK_S)
                await asyncio.sleep(max(wait, POLL_S))
                continue
            # asyncio.timeout, not wait_for: no task made per turn (a turn per rollout ended).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._changed.wait()

    async def _members_ask(self) -> None:
        """Have a worker build the zip members of the seeds that ended lately, while this
        runner's process has CPU to spare (`jobs.worker.here.LoopLag.spare`: its loop keeps up
        and no CPU quota throttled it), else a build in its process would take it from the
        rollouts (a worker held to a tenth of a CPU spent half again the CPU a rollout); the
        zip builds the members it lacks as the job ends."""
        if self.lag.spare():
            await self.db(job_trace_members_dispatch, job_id=self.job_id)

    def hand_joined(self) -> None:
        """A message for this job reached this process (`jobs.worker.here`): more slots,
        claimed at once, and a hand asked for again once they fill."""
        self.cap = min(self.cap + settings.EVALHUB_RUNNER_MAX_INFLIGHT, self.cap_most)
        self.ask_hand = True
        self.starved = False
        self._changed.set()

    async def _claim_asking(self, now: float) -> None:
        """Claim; ask other workers for hands (`hands_ask`) when the claim filled the slots and
        the job has more (asked as the claim starts: a hand joining meanwhile asks for the next,
        `hand_joined`), or, no other worker taking messages, join itself. A claim that found
        nothing for another worker (`max_concurrent` held by others) keeps the request."""
        ask = self.ask_hand and now >= self.hand_due
        self.ask_hand = self.ask_hand and not ask
        room = await self._claim()
        if room and ask and not await self.db(hands_ask, job_id=self.job_id, room=room):
            self.hand_joined()  # no other worker takes messages
        elif ask and not room:
            self.ask_hand = True

    def hand_passed(self) -> None:
        """A hand reached this process while its loop was late (`jobs.worker.here`): it went
        back to the queue; another is asked for in HAND_AGAIN_S, when a claim fills."""
        self.ask_hand, self.hand_due = True, time.monotonic() + HAND_AGAIN_S

    def _claim_due(self, since_claim: float) -> bool:
        """A batch (an eighth) of the runner's slots is free, or POLL_S went by with any slot
        free; after a claim that got less than it asked, only the latter."""
        free = self.slots() - self.holding() - self.reserved
        if free >= max(1, self.cap // 8) and not self.starved:
            return True
        return free > 0 and since_claim >= POLL_S

    async def _claim(self) -> int:
        """Claim from every source in turn while slots are free; the job's room for others."""
        free = asked = max(0, self.slots() - self.holding() - self.reserved)
        self.reserved += asked
        room = 0
        try:
            for source in self.sources:
                if free <= 0:
                    break
                claimed, source_room = await source.claim(free)
                room = max(room, source_room)
                for key, work in claimed:
                    self._start((source.name, key), work)
                free -= len(claimed)
        finally:
            self.reserved -= asked
        self.starved = free > 0
        return room

    def slots_reserve(self, *, freed: int) -> int:
        """How many seeds a batch of `freed` results (still in flight) may claim as it is
        written: its slots, less those another claim in progress may fill, while the runner
        claims at all; held until `slots_release`."""
        if not self.claiming:
            return 0
        n = max(0, min(freed, self.slots() - self.holding() + freed - self.reserved))
        self.reserved += n
        return n

    def slots_release(self, n: int) -> None:
        self.reserved -= n

    def results_written(self, keys: list[tuple[str, int]]) -> None:
        """These works' slots are free (their results written, or their slots taken ahead of
        the write: `RolloutSource`), though their tasks end a turn or a batch later. A batch
        written meanwhile counted them as held, and claimed as many fewer."""
        self.written.update(key for key in keys if key in self.in_flight)

    def holding(self) -> int:
        """The slots held: work in flight whose result is not written yet."""
        return len(self.in_flight) - len(self.written)

    def slots(self) -> int:
        """Its cap, and the rollouts it may hold ahead of the task app (`RolloutSource.ahead`)."""
        return self.cap + (self.rollouts.ahead() if self.rollouts else 0)

    def claimed_start(self, key: tuple[str, int], work) -> None:
        """Start work a batch of results claimed; none once the work loop ended (it would
        outlive the runner): its lease lapses and another runner takes it."""
        if self.working:
            self._start(key, work)
        else:
            work.close()
            log.warning("job %s: %s %s claimed as the runner ended", self.job_id, *key)

    def _start(self, key: tuple[str, int], work) -> None:
        if superseded := self.in_flight.get(key):  # its lease lapsed and we took it again:
            superseded.cancel()  # that attempt was abandoned, its result would be refused
        self.written.discard(key)
        self.in_flight[key] = task = asyncio.create_task(work)
        self.started += 1
        self.held_most = max(self.held_most, len(self.in_flight))

        def finished(t: asyncio.Task) -> None:
            self.finished += 1
            if self.in_flight.get(key) is t:
                del self.in_flight[key]
                self.written.discard(key)
            if not t.cancelled() and t.exception() is not None:
                log.error("job %s: a %s task crashed", self.job_id, key[0], exc_info=t.exception())
            self._changed.set()

        task.add_done_callback(finished)

    async def _renew(self) -> None:
        for source in self.sources:
            keys = [key for name, key in self.in_flight if name == source.name]
            held = await source.renew(keys)
            for key in set(keys) - held:
                # Taken over after our lease ran out, or the job closed it: not ours to write.
                task = self.in_flight.pop((source.name, key), None)
                self.written.discard((source.name, key))
                if task is not None:
                    task.cancel()
        await self.db(services.job_heartbeat, job_id=self.job_id)

    async def _slice_ended(self, *, draining: bool) -> tuple[bool, float] | None:
        """A slice ended: it goes on while no other message waits in the queue (not when
        draining), else the job is handed over. Whether it was, and the seconds to the next
        slice end; None when the job is finished."""
        if not draining and await self.db(queue_waiting) == 0:
            return False, self.slice_s  # nothing waits for this thread: go on
        sent = await self._hand_over(held=self.started > 0)
        if sent is None:
            return None
        # A message the broker did not take: the job stays with this runner, which tries again.
        return sent, 0.0 if sent else UNSENT_RETRY_S

    async def _hand_over(self, *, held: bool) -> bool | None:
        """Send the job's message again to the back of the queue if it has work left, unless
        others hold leases on it and this runner `held` nothing (they send it as their slices
        end). None when nothing is left (the job is finished here); False when the broker did
        not take the message (down, restarting): the runner keeps the job meanwhile."""
        left = await self.db(claims.job_left, job_id=self.job_id, worker=self.worker)
        if left.claim_in is None:
            await self._finish()
            return None
        if held or not left.held_elsewhere:
            return await self.db(job_dispatch, job_id=self.job_id)
        return True

    async def _finish(self) -> None:
        """Nothing is open: end the job (whichever runner sees it first)."""
        await self.db(services.job_finish_if_done, job_id=self.job_id, summarize=job_summary)

    async def _abort_all(self) -> None:
        """The job is over (cancelled, failed, stopped): what is in flight stops. Closing the
        job closed its samples already (jobs.ending.job_end)."""
        if aborted := await self._in_flight_cancel():
            log.info("job %s is over: aborted %d rollouts and judgements", self.job_id, aborted)

    async def _in_flight_cancel(self) -> int:
        """Stop what is in flight, writing nothing for it; how many there were."""
        tasks = list(self.in_flight.values())
        self.in_flight.clear()
        self.written.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)
