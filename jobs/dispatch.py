"""Handing a job to the workers: one Celery message carrying only the job id.

Sent by task name, so the code that creates jobs needs nothing of the worker's modules. A
broker that is down does not lose the job: it is committed already, and Celery beat's
`jobs.jobs_redispatch` hands out every job no runner has shown a sign of life for.
"""

from __future__ import annotations

import logging

from django.conf import settings

from evalhub.celery import app

log = logging.getLogger(__name__)

JOB_RUN_TASK = "jobs.job_run"
JOBS_REDISPATCH_TASK = "jobs.jobs_redispatch"
JOB_JUDGE_TASK = "jobs.job_judge"
TRACES_ZIP_TASK = "traces.job_traces_zip_build"
TRACES_MEMBERS_TASK = "traces.job_members_build"


def job_dispatch(job_id: str) -> bool:
    """Send the job to the workers (`EVALHUB_JOB_FANOUT` messages: several workers share a big
    job by claiming from its rows). False when the broker could not be reached."""
    try:
        for _ in range(settings.EVALHUB_JOB_FANOUT):
            app.send_task(JOB_RUN_TASK, args=[job_id])
    except Exception:  # any broker failure: the job waits in the database for the redispatch
        log.warning("job %s: the broker is unreachable; it will be handed out later", job_id,
                    exc_info=True)  # fmt: skip
        return False
    return True


def _send(task: str, job_id: str, *, unsent: str, **options) -> bool:
    """Send a task about a job; False, with `unsent` (what happens then) logged, when the broker
    could not be reached."""
    try:
        app.send_task(task, args=[job_id], **options)
    except Exception:  # any broker failure
        log.warning("job %s: the broker is unreachable; %s", job_id, unsent, exc_info=True)
        return False
    return True


def job_judge_dispatch(job_id: str) -> bool:
    """Send the job's judgements to a judge worker (jobs/verifier/); False when the broker could
    not be reached (the next rollout runner to end sends it again)."""
    return _send(JOB_JUDGE_TASK, job_id, unsent="judging waits")


def job_traces_zip_dispatch(job_id: str) -> bool:
    """Have a worker build and store the zip of a job that ended (traces/export.py), once the
    calls its last rollouts made are saved (EVALHUB_TRACES_ZIP_AFTER_S); False when the broker
    could not be reached (the first download builds it then)."""
    return _send(TRACES_ZIP_TASK, job_id, unsent="its zip is built on first download",
                 countdown=settings.EVALHUB_TRACES_ZIP_AFTER_S)  # fmt: skip


def job_trace_members_dispatch(job_id: str) -> bool:
    """Have a worker build the zip members of the seeds the job finished lately (sent by its
    runners every EVALHUB_TRACES_ZIP_AFTER_S seconds, traces/members.py); False when the broker
    could not be reached (the zip builds them then)."""
    return _send(TRACES_MEMBERS_TASK, job_id, unsent="its zip builds the members it lacks")
