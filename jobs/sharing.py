"""Sharing jobs between worker processes: idle workers join running jobs.

A job starts with one runner (one Celery message). While it runs, its runners look every
INVITE_S at whether it could use more hands: seeds waiting to be claimed, and fewer worker
processes running it than there are live workers (by their heartbeats). Then they send one
more runner of the job (a `join` message); a worker process that already runs the job drops
it at once (`local_runner`), any other starts a runner, which claims its fair share of the job's
`max_concurrent` (jobs.leases). So a job spreads over every worker that is idle or has a free
slot, as workers come and go, without a fan-out setting; claims stay exactly-once (leases).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from django.db.models import Q
from django.utils import timezone

from evalhub import heartbeats
from evalhub.celery import app
from jobs.dispatch import JOB_RUN_TASK
from jobs.models import SeedRun, SeedStatus

log = logging.getLogger(__name__)

# How often a runner asks whether its job could use another worker.
INVITE_S = 2.0

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
    """The worker processes (`host:pid`) holding live leases on seeds of the job."""
    owners = (
        SeedRun.objects.filter(
            job_id=job_id, status=SeedStatus.RUNNING, lease_expires_at__gt=timezone.now()
        )
        .values_list("lease_owner", flat=True)
        .distinct()
    )
    return {owner.rsplit(":", 1)[0] for owner in owners}


def job_wants_workers(*, job_id: str, live_workers: int) -> bool:
    """Seeds of the job wait to be claimed now, and fewer processes run it than there are
    live workers."""
    if live_workers <= 1:
        return False
    waiting = SeedRun.objects.filter(job_id=job_id, status=SeedStatus.PENDING).filter(
        Q(not_before__isnull=True) | Q(not_before__lte=timezone.now())
    )
    return waiting.exists() and len(runner_processes(job_id=job_id)) < live_workers


def job_invite_workers(*, job_id: str) -> bool:
    """Send one more runner of the job when it wants workers; True when one was sent."""
    try:
        live = len(heartbeats.live_workers()) if heartbeats.supported() else 0
    except Exception:  # the broker is down: nobody could take the message anyway
        return False
    if not job_wants_workers(job_id=job_id, live_workers=live):
        return False
    try:
        app.send_task(JOB_RUN_TASK, args=[job_id], kwargs={"join": True})
    except Exception:
        log.warning("job %s: could not invite another worker", job_id, exc_info=True)
        return False
    return True
