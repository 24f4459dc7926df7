"""Celery tasks: they take ids, load rows, call services.

Bound to evalhub's own Celery app (not `shared_task`): a library that creates its own Celery
app in the same process would otherwise become the "current" app and receive our messages.
"""

from __future__ import annotations

import logging

from evalhub.celery import app
from jobs import runner, services, sharing
from jobs.dispatch import JOB_JUDGE_TASK, JOB_RUN_TASK, JOBS_REDISPATCH_TASK, job_dispatch
from jobs.verifier import worker as verifier_worker

log = logging.getLogger(__name__)


@app.task(name=JOB_RUN_TASK)
def job_run(job_id: str, join: bool = False) -> None:
    """Work on the job's seed runs until none is left to claim (see jobs.runner). Safe to
    deliver twice: seeds are claimed atomically, so a second run shares the work. A `join`
    (a runner inviting another worker, jobs.sharing) is dropped by a process running the job."""
    with sharing.local_runner(job_id) as first:
        if join and not first:
            return
        runner.job_run(job_id=job_id)


@app.task(name=JOB_JUDGE_TASK)
def job_judge(job_id: str) -> None:
    """Judge the job's succeeded rollouts with its verifier (jobs/verifier/worker.py); safe to
    deliver twice: judgements are claimed atomically."""
    verifier_worker.judge_run(job_id=job_id)


@app.task(name=JOBS_REDISPATCH_TASK)
def jobs_redispatch() -> None:
    """Periodic (Celery beat): hand out again the jobs nobody is working on."""
    for job_id in services.jobs_redispatch():
        log.info("job %s: no live runner, dispatching it again", job_id)
        job_dispatch(job_id)
