"""How a job ends early (cancelled, failed, stopped for `max_failures`): one path for the
three, `job_end`. A job that ends with all its samples over is `jobs.services.job_finish_if_done`.

Ending is three short transactions, so that no one sees a job over with samples still open:
1. under the job row's lock, the job is marked ending (`completed_at`, with `error` or
   `cancel_requested_at`, which say how it ends): from then on no claim takes anything from it
   (claims need a running job not ending), so what is open now is all there will be;
2. without that lock, its open samples close by the rule of how it ends (`_closing`);
3. under the lock again, its status and its event.
A worker writing a batch of results holds its attempts' and seeds' rows when it waits for the
job row (to claim its next rollouts): closing those rows while holding the job row waited for
that worker while it waited for us, a deadlock on PostgreSQL. Each step is idempotent: a
process stopped between two leaves a job ending, and the next `job_end` of it (any of the
three, the runner finding nothing left, or beat's `jobs.services.jobs_redispatch`) finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, transaction
from django.utils import timezone

from evalhub import revocations
from jobs.events import EventType, job_event_append
from jobs.models import (
    OPEN_JUDGE_STATUSES,
    AttemptStatus,
    EvalJob,
    JobStatus,
    JudgeStatus,
    RolloutAttempt,
    SeedRun,
    SeedStatus,
)

TRIES = 5
# The error of a job stopped for max_failures says this (jobs.stopping); its open samples end
# cancelled with STOPPED, not failed with the job's error.
MARK = "samples failed, more than max_failures"
STOPPED = "cancelled: the job failed more samples than max_failures allows"
_T = TypeVar("_T")


def job_end(
    *, job_id: str, end: Callable[[EvalJob], str | None] | None = None
) -> tuple[EvalJob | None, bool]:
    """End a job that is neither over nor ending: under its row's lock, `end(job)` says how,
    `CANCEL` or the error it fails with (None: it goes on); then its samples close and its
    status is written. A job ending already (its ender stopped half-way) is finished, however
    it was ending; `end` None only finishes. Returns (the job, None if it is gone; whether
    this call ended it). Never fails for contention: a transaction the database broke is tried
    again."""
    job, ended = _tried_again(lambda: _mark(job_id, end))
    if job is None or not job.is_ending:
        return job, False
    _tried_again(lambda: _samples_close(job))
    return _tried_again(lambda: _status_write(job)), ended


# What `end` answers for a cancel.
CANCEL = ""


def _mark(job_id: str, end) -> tuple[EvalJob | None, bool]:
    with transaction.atomic():
        # NO KEY, like every lock on the job row: workers inserting events and seed results
        # take key-share locks on it, which a plain FOR UPDATE would wait for.
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.is_terminal or job.is_ending or end is None:
            return job, False
        error = end(job)
        if error is None:
            return job, False
        job.completed_at = timezone.now()
        if error == CANCEL:
            job.cancel_requested_at = job.completed_at
            job.save(update_fields=["completed_at", "cancel_requested_at"])
        else:
            job.error = error
            job.save(update_fields=["completed_at", "error"])
        return job, True


def _closing(job: EvalJob) -> tuple[str, str, str, tuple[EventType, dict]]:
    """How an ending job ends: (its status, its open samples' status and error, its event)."""
    if job.cancel_requested_at is not None:
        return JobStatus.CANCELLED, SeedStatus.CANCELLED, "cancelled", (
            EventType.JOB_CANCELLED, {})  # fmt: skip
    event = (EventType.JOB_FAILED, {"error": job.error})
    if MARK in (job.error or ""):
        return JobStatus.FAILED, SeedStatus.CANCELLED, STOPPED, event
    return JobStatus.FAILED, SeedStatus.FAILED, job.error, event


def _samples_close(job: EvalJob) -> int:
    """Close every open sample of an ending job, by `_closing`'s rule: its rollouts, pending or
    running, end with that status and error and give their leases up (a runner still at work on
    one can write nothing more: every write of a result needs the lease, jobs.leases); their
    running attempts end `cancelled` (so their interceptor URLs close); open judgements end
    `cancelled`. Returns the number of rollouts closed."""
    _, status, error, _ = _closing(job)
    now = job.completed_at
    with transaction.atomic():
        samples = SeedRun.objects.filter(job_id=job.pk)
        # Their locks in id order, the order a worker's batch of results takes them in.
        running = list(
            RolloutAttempt.objects.select_for_update()
            .filter(seed_run__in=samples.rollouts_open(), status=AttemptStatus.RUNNING)
            .order_by("id")
            .values_list("id", flat=True)
        )
        revocations.publish_on_commit(running)
        RolloutAttempt.objects.filter(pk__in=running).update(
            status=AttemptStatus.CANCELLED, finished_at=now, error=error
        )
        closed = samples.rollouts_open().update(
            status=status, error=error, finished_at=now, lease_owner="", lease_expires_at=None
        )
        samples.filter(judge_status__in=OPEN_JUDGE_STATUSES).update(
            judge_status=JudgeStatus.CANCELLED, judge_lease_owner="", judge_lease_expires_at=None,
            verifier_error=error,
        )  # fmt: skip
    return closed


def _status_write(job: EvalJob) -> EvalJob:
    """The ending job's status and its event, once (another process may have written them)."""
    status, _, _, (event, data) = _closing(job)
    with transaction.atomic():
        open_ = EvalJob.objects.filter(pk=job.pk, status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        updated = open_.update(status=status)
        if updated:
            job_event_append(job_id=job.pk, type=event, data=data)
    job.status = status
    return job


def _tried_again(call: Callable[[], _T]) -> _T:
    """`call()`, tried again when the database breaks its transaction (a deadlock or a
    serialization failure with workers writing meanwhile); the last try raises what it meets."""
    for attempt in range(1, TRIES):
        try:
            return call()
        except OperationalError:
            time.sleep(0.05 * attempt)
    return call()
