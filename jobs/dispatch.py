"""Handing work to the workers: Celery messages carrying only a job id.

Sent by task name, so the code that creates jobs needs nothing of the worker's modules. A
broker that is down does not lose the job: it is committed already, and Celery beat's
`jobs.jobs_redispatch` hands out every job no runner has shown a sign of life for.
"""

from __future__ import annotations

import logging

from django.conf import settings
from kombu.exceptions import ChannelError

from evalhub.celery import app

log = logging.getLogger(__name__)

JOB_RUN_TASK = "jobs.job_run"
JOBS_REDISPATCH_TASK = "jobs.jobs_redispatch"
TRACES_ZIP_TASK = "traces.job_traces_zip_build"
TRACES_MEMBERS_TASK = "traces.job_members_build"


def _send(task: str, job_id: str, *, unsent: str, **options) -> bool:
    """Send a task about a job; False, with `unsent` (what happens then) logged, when the broker
    could not be reached."""
    try:
        # No retries: a caller (a runner) must not wait on a broker that is down.
        app.send_task(task, args=[job_id], retry=False, **options)
    except Exception:  # any broker failure
        log.warning("job %s: the broker is unreachable; %s", job_id, unsent, exc_info=True)
        return False
    return True


def queue_waiting() -> int | None:
    """How many messages wait in the queue for a free worker thread (the broker's own count:
    Redis' LLEN, the file-system broker's files); None when the broker cannot say."""
    try:
        with app.connection_or_acquire() as connection:
            declared = connection.default_channel.queue_declare(
                queue=app.conf.task_default_queue, passive=True
            )
    except ChannelError as exc:  # Redis keeps no empty list: an empty queue is "not found"
        return 0 if str(exc.reply_code) == "404" else None
    except Exception:  # any broker failure: the caller does what it does when nobody waits
        return None
    return declared.message_count


def job_dispatch(job_id: str, *, passed: bool = False) -> bool:
    """Send the job's message to the back of the queue: a runner (jobs/worker/runner.py) works
    a slice of it (`passed`: a hand a busy worker sent on). False when the broker could not be
    reached (Celery beat hands it out)."""
    options = {"kwargs": {"passed": True}} if passed else {}
    return _send(JOB_RUN_TASK, job_id, unsent="it will be handed out later", **options)


def job_traces_zip_dispatch(job_id: str) -> bool:
    """Have a worker build and store the zip of a job that ended (traces/zip/export.py), once the
    calls its last rollouts made are saved (EVALHUB_TRACES_ZIP_AFTER_S); False when the broker
    could not be reached (the first download builds it then)."""
    return _send(TRACES_ZIP_TASK, job_id, unsent="its zip is built on first download",
                 countdown=settings.EVALHUB_TRACES_ZIP_AFTER_S)  # fmt: skip


def job_trace_members_dispatch(job_id: str) -> bool:
    """Have a worker build the zip members of the seeds the job finished lately (sent by its
    runners every EVALHUB_TRACES_ZIP_AFTER_S seconds, traces/zip/members.py); False when the broker
    could not be reached (the zip builds them then)."""
    return _send(TRACES_MEMBERS_TASK, job_id, unsent="its zip builds the members it lacks")
