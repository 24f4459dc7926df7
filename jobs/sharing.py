"""Sharing jobs between worker processes: idle workers join running jobs.

A job starts with one runner (one Celery message). While it runs, its runners look every
INVITE_S at whether it could use more hands (`Inviter`): seeds waiting to be claimed, and fewer
worker processes running it than there are live workers (by their heartbeats). Then they send one
more runner of the job (a `join` message) to a live worker that does not run it, on that
worker's own queue (`CELERY_WORKER_DIRECT`); a worker process that already runs the job drops a
join (`local_runner`), any other starts a runner, which claims its fair share of the job's
`max_concurrent` (jobs.leases). So a job spreads over every worker that is idle or has a free
slot, as workers come and go, without a fan-out setting; claims stay exactly-once (leases).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator

from celery.utils.nodenames import worker_direct
from django.db.models import Q
from django.utils import timezone
from kombu import Exchange, Queue

from evalhub import heartbeats
from evalhub.celery import app
from jobs.dispatch import JOB_RUN_TASK
from jobs.leases import runners_waiting
from jobs.models import SeedRun, SeedStatus

log = logging.getLogger(__name__)

# How often a runner asks whether its job could use another worker (at most; see Inviter).
INVITE_S = 2.0
INVITE_MAX_S = 60.0
# How long a process trusts its read of the live workers (one read serves all its runners).
LIVE_READ_S = 1.0

_local_lock = threading.Lock()
_local_jobs: dict[str, int] = {}


@contextlib.contextmanager
def local_runner(job_id: str) -> Iterator[bool]:
    """Count a runner of the job in this process while it runs; yields whether it is the
    first (a `join` message to a process already running the job is dropped)."""
    with _local_lock:
        first = _local_jobs.get(job_id, 0) == 0
        _local_jobs[job_id] = _local_jobs.get(job_id, 0) + 1
    try:
        yield first
    finally:
        with _local_lock:
            _local_jobs[job_id] -= 1
            if not _local_jobs[job_id]:
                del _local_jobs[job_id]


def runner_processes(*, job_id: str) -> set[str]:
    """The worker processes (`host:pid`) holding live leases on seeds of the job, or waiting
    for some (jobs.leases: the others hold every slot)."""
    now = timezone.now()
    owners = (
        SeedRun.objects.filter(job_id=job_id, status=SeedStatus.RUNNING, lease_expires_at__gt=now)
        .values_list("lease_owner", flat=True)
        .distinct()
    )
    waiting = runners_waiting(job_id=job_id, now=now)
    return {process_of(runner) for runner in [*owners, *waiting]}


def process_of(runner: str) -> str:
    """The worker process ("host:pid") of a runner's name ("host:pid:id", jobs.runner)."""
    return runner.rsplit(":", 1)[0]


def job_wants_workers(*, job_id: str, live_workers: int, processes: int) -> bool:
    """Seeds of the job wait to be claimed now, and fewer processes run it than there are
    live workers."""
    if processes >= live_workers:
        return False
    waiting = SeedRun.objects.filter(job_id=job_id, status=SeedStatus.PENDING).filter(
        Q(not_before__isnull=True) | Q(not_before__lte=timezone.now())
    )
    return waiting.exists()


class _LiveWorkers:
    """The live worker processes, as (node name, "host:pid"), read at most once per
    LIVE_READ_S by a process however many runners it has (each looks every INVITE_S)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read_at = -LIVE_READ_S
        self.live: frozenset[tuple[str, str]] = frozenset()

    def __call__(self) -> frozenset[tuple[str, str]]:
        with self.lock:
            if time.monotonic() - self.read_at >= LIVE_READ_S:
                self.live = self._read()
                self.read_at = time.monotonic()
            return self.live

    @staticmethod
    def _read() -> frozenset[tuple[str, str]]:
        try:
            if not heartbeats.supported():
                return frozenset()
            live = heartbeats.live_workers()
        except Exception:  # the broker is down: nobody could take a message anyway
            return frozenset()
        return frozenset((w["worker"], f"{w['host']}:{w['pid']}") for w in live)


_live_workers = _LiveWorkers()


def worker_queue(node: str) -> Queue:
    """The worker's own queue (`CELERY_WORKER_DIRECT`), addressed by name through the default
    exchange: that needs no binding, which the file-system broker keeps per process."""
    name = worker_direct(node).name
    return Queue(name, Exchange(""), routing_key=name)


def _outside(workers: frozenset[tuple[str, str]], running: set[str]) -> list[str]:
    """The node names of those `workers` whose process is not in `running`."""
    return sorted(node for node, process in workers if process not in running)


class Inviter:
    """A runner's invitations: it looks every INVITE_S, and invites while its job wants workers.
    When an invitation did not bring another process (every worker's threads are busy, or the
    worker that took it died), the next waits twice as long, up to INVITE_MAX_S, so invitations
    nobody can take do not pile up in the queue; a worker process that started since the last
    look is idle, and is invited at once."""

    def __init__(self, job_id: str, *, runner: str):
        self.job_id = job_id
        self.process = process_of(runner)  # ours: it runs the job even holding nothing
        self.interval = INVITE_S
        self.next_at = 0.0
        self.send_after = 0.0
        self.processes_before: int | None = None
        self.known: frozenset[tuple[str, str]] = frozenset()

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def invite(self, *, now: float) -> bool:
        """Send one more runner of the job if it wants workers; True when one was sent."""
        self.next_at = now + INVITE_S
        live = _live_workers()
        newcomers = live - self.known
        self.known = live
        if now < self.send_after and not newcomers:
            return False
        running = runner_processes(job_id=self.job_id) | {self.process}
        processes = len(running)
        if self.processes_before is not None and processes <= self.processes_before:
            self.interval = min(self.interval * 2, INVITE_MAX_S)
        if newcomers or self.processes_before is None or processes > self.processes_before:
            self.interval = INVITE_S
        self.send_after = now + self.interval
        wanted = job_wants_workers(job_id=self.job_id, live_workers=len(live), processes=processes)
        self.processes_before = processes if wanted else None
        # To a worker not running the job, on its own queue (on the shared queue the process
        # that runs the job, with a thread free, could take the invitation and drop it); one
        # that just started first: it is idle.
        others = _outside(newcomers, running) or _outside(live, running)
        if not wanted or not others:
            return False
        try:
            app.send_task(
                JOB_RUN_TASK, args=[self.job_id], kwargs={"join": True},
                queue=worker_queue(random.choice(others)), expires=INVITE_MAX_S,
            )  # fmt: skip
        except Exception:
            log.warning("job %s: could not invite another worker", self.job_id, exc_info=True)
            return False
        return True
