"""Celery tasks: they take ids, load rows, call services.

Bound to evalhub's own Celery app (not `shared_task`): a library that creates its own Celery
app in the same process would otherwise become the "current" app and receive our messages.
"""

from __future__ import annotations

import logging

from celery.signals import worker_init
from django.conf import settings

from evalhub import heartbeats
from evalhub.celery import app
from jobs import services
from jobs.dispatch import JOB_RUN_TASK, JOBS_REDISPATCH_TASK, job_dispatch
from jobs.worker import clients, runner

log = logging.getLogger(__name__)


@worker_init.connect
def worker_warm(**_: object) -> None:
    """As a worker starts: what its first runner would build (`jobs.worker.clients.warm`)."""
    clients.warm()


@app.task(name=JOB_RUN_TASK)
def job_run(job_id: str, passed: bool = False, **_: object) -> None:
    """Work a slice of the job: its rollouts and judgements (jobs/worker/runner.py). Safe to
    deliver twice: work is claimed atomically, so a second runner shares it."""
    runner.job_run(job_id=job_id, passed=passed)


@app.task(name=JOBS_REDISPATCH_TASK)
def jobs_redispatch() -> None:
    """Periodic (Celery beat): hand out again the jobs nobody is working on, and those whose
    leases a dead worker held (by its heartbeats: it stopped for EVALHUB_WORKER_LOST_S)."""
    live = heartbeats.live_processes(within_s=settings.EVALHUB_WORKER_LOST_S)
    for job_id in services.jobs_redispatch(live=live):
        log.info("job %s: no live runner, dispatching it again", job_id)
        job_dispatch(job_id)
