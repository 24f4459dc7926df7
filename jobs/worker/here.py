"""The runners working in this worker process, by job (`jobs.worker.runner`): a hand (the
job's message) reaching a process that runs the job joins the runner there rather than
starting a second one beside it, while that runner keeps up with what it holds.

Whether it keeps up is how late its event loop wakes (`LoopLag`): a runner whose process has
CPU to spare (its rollouts wait on the task app) takes more slots; one whose loop is late
holds all it can turn over already, and more slots would only wait in its loop while other
workers sit idle, so the hand goes back to the queue for another worker.

A late runner still takes the hand when no other live worker takes messages: sent back, the
hand came back to the same runner HAND_AGAIN_S later, and a lone worker ran its job's first
seconds on half its `max_concurrent`.

How many hands a runner asks for (`hands_ask`): as many as the seeds left could keep busy, no
more than the other live workers; with none, no message: the runner takes the hand itself. Both
count the other workers as this process's heartbeat last saw them
(`evalhub.heartbeats.others_consuming`)."""

from __future__ import annotations

import asyncio
import enum
import itertools
import statistics
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings

from evalhub import heartbeats
from evalhub.cpuquota import Throttling
from jobs.dispatch import job_dispatch

if TYPE_CHECKING:
    from jobs.worker.runner import JobRunner

# How often the loop's lateness is sampled, over how many samples (a second).
LAG_EVERY_S = 0.05
LAG_SAMPLES = 20
# A loop late by more than this (the median of the last second) keeps up no more.
LAG_MOST_S = 0.01


class LoopLag:
    """How late a runner's event loop wakes from a timer: near 0 while the process keeps up,
    growing with the callbacks queued ahead of it when its CPU is the bound."""

    def __init__(self) -> None:
        self._late: deque[float] = deque([0.0], maxlen=LAG_SAMPLES)
        self._quota = Throttling()
        self.throttled = False  # a CPU quota held the process back in the last second

    async def watch(self) -> None:
        loop = asyncio.get_running_loop()
        for n in itertools.count(1):
            asleep = loop.time()
            await asyncio.sleep(LAG_EVERY_S)
            self._late.append(max(0.0, loop.time() - asleep - LAG_EVERY_S))
            if n % LAG_SAMPLES == 0:
                self.throttled = self._quota.since_last()

    def late_s(self) -> float:
        """The median lateness over the last second (read from any thread)."""
        return statistics.median(list(self._late))

    def keeps_up(self) -> bool:
        """Whether the loop has CPU to spare: more work would not wait in it."""
        return self.late_s() <= LAG_MOST_S

    def spare(self) -> bool:
        """Whether the process has CPU to spare (for a build of the zip's members, for slots
        taken ahead of their results' write): the loop keeps up, and no CPU quota held the
        process back in the last second (`evalhub.cpuquota`). A worker held to a tenth of a
        CPU by its cgroup kept up by its loop's lateness while throttled in 97% of its
        periods, and the builds it asked for cost four capped workers a tenth of their CPU
        during the job."""
        return not self.throttled and self.keeps_up()


class Hand(enum.Enum):
    """What became of a hand (the job's message) reaching this process."""

    JOINED = "joined"  # the job's runner here took more slots
    BUSY = "busy"  # the job's runner here keeps up no more: another worker should lend it
    FIRST_ELSEWHERE = "first elsewhere"  # the job runs here: another worker may be idle
    ABSENT = "absent"  # no runner here works the job (or may take a hand now): start one


class Here:
    """The runners working in this process, by job: a hand for a job one of them works joins
    it (`JobRunner.hand_joined`) rather than starting a second one here."""

    def __init__(self, others: Callable[[], int] | None = None) -> None:
        self._others = others or others_take_messages
        self._runners: dict[str, JobRunner] = {}
        self._lock = threading.Lock()

    def add(self, runner: JobRunner) -> None:
        with self._lock:
            self._runners.setdefault(runner.job_id, runner)

    def remove(self, runner: JobRunner) -> None:
        with self._lock:
            if self._runners.get(runner.job_id) is runner:
                del self._runners[runner.job_id]

    def join(self, job_id: str, *, passed: bool) -> Hand:
        """Whether a runner of the job here took the hand: one still claiming (not handing
        the job over nor draining), whose loop runs and keeps up. A hand not `passed` on yet
        goes to the other workers first (`FIRST_ELSEWHERE`): a runner here that took every
        hand its own process's consumer fetched first held all the job's slots in one
        interpreter while the workers asked for stayed idle. A runner whose loop is late passes
        the hand on (`BUSY`) only while another worker takes messages."""
        with self._lock:
            runner = self._runners.get(job_id)
            if runner is None or not runner.claiming:
                return Hand.ABSENT
            if not passed:
                return Hand.FIRST_ELSEWHERE
            busy = not runner.lag.keeps_up() and self._others() > 0
            try:
                runner.loop.call_soon_threadsafe(runner.hand_passed if busy else runner.hand_joined)
            except RuntimeError:  # its loop closed meanwhile
                return Hand.ABSENT
            return Hand.BUSY if busy else Hand.JOINED


def others_take_messages() -> int:
    """How many live workers besides this one take messages; 1 when that cannot be known (the
    broker is down)."""
    try:
        return heartbeats.others_consuming()
    except Exception:  # noqa: BLE001
        return 1


HERE = Here()


def hands_ask(*, job_id: str, room: int) -> bool:
    """Send the job's message once for each hand its `room` (the seeds another runner could
    take now) keeps busy, a runner's EVALHUB_RUNNER_MAX_INFLIGHT each, but for no more than
    the other live workers that take messages (a draining one takes none): idle ones start on
    the job together. Asked one at a time, each new runner asking for the next once its first
    claim filled, the fourth of four capped workers started 6 s into a 17 s job.

    False, sending nothing, when no other live worker takes messages: the message could only
    come back to the asking process, passed on once (`Hand.FIRST_ELSEWHERE`), then joined, two
    trips through the broker for each EVALHUB_RUNNER_MAX_INFLIGHT slots: a lone worker held a
    256-slot job's `max_concurrent` 200 ms after the job started (150 ms joining itself). The
    runner joins itself (`JobRunner._claim_asking`)."""
    others = others_take_messages()  # the broker down: the one message below says so
    if others == 0:
        return False
    wanted = -(-room // settings.EVALHUB_RUNNER_MAX_INFLIGHT)
    for _ in range(max(1, min(wanted, others))):
        if not job_dispatch(job_id):
            break
    return True
