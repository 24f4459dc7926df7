"""Stopping a broken job early: once more samples have failed than the job's `max_failures`
allows, the job ends `failed` with an error saying how many failed and the most common error,
and the samples not yet over end `cancelled` (no further rollout is sent: claims need a running
job, and the runners abort what is in flight when they see the job is over)."""

from __future__ import annotations

import math
from collections import Counter

from django.db import transaction
from django.utils import timezone

from jobs.events import EventType
from jobs.models import EvalJob, JobStatus, SeedRun, SeedStatus
from jobs.services import job_close

STOPPED = "cancelled: the job failed more samples than max_failures allows"
# In the error of a job this module stopped.
MARK = "samples failed, more than max_failures"


def failure_limit(job: EvalJob) -> int | None:
    """How many failed samples the job tolerates (None: any number)."""
    if job.max_failures is None:
        return None
    if job.max_failures >= 1:
        return int(job.max_failures)
    return math.floor(job.max_failures * job.num_samples)


def job_stop_if_broken(*, job_id: str) -> bool:
    """End the job `failed` if more samples failed than its `max_failures`; True if it did.
    Called again for a job it stopped (a runner's database call tried again), it finishes the
    close of the job's samples if that stopped half-way."""
    with transaction.atomic():
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None:
            return False
        stopped_before = job.status == JobStatus.FAILED and MARK in (job.error or "")
        if not stopped_before:
            if job.status != JobStatus.RUNNING or (error := _broken(job)) is None:
                return False
            job.status, job.error, job.completed_at = JobStatus.FAILED, error, timezone.now()
            job.save(update_fields=["status", "error", "completed_at"])
    job_close(
        job_id=job_id, status=SeedStatus.CANCELLED, error=STOPPED, now=job.completed_at,
        event=(EventType.JOB_FAILED, {"error": job.error}), ended=not stopped_before,
    )  # fmt: skip
    return not stopped_before


def _broken(job: EvalJob) -> str | None:
    """The job's error if more samples failed than it tolerates, else None."""
    limit = failure_limit(job)
    if limit is None:
        return None
    failed = SeedRun.objects.filter(job_id=job.id, status=SeedStatus.FAILED)
    count = failed.count()
    if count <= limit:
        return None
    common, times = Counter(failed.values_list("error", flat=True)).most_common(1)[0]
    return f"{count} of {job.num_samples} {MARK} ({limit}); most common error ({times}x): {common}"
