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


def failure_limit(job: EvalJob) -> int | None:
    """How many failed samples the job tolerates (None: any number)."""
    if job.max_failures is None:
        return None
    if job.max_failures >= 1:
        return int(job.max_failures)
    return math.floor(job.max_failures * job.num_samples)


def job_stop_if_broken(*, job_id: str) -> bool:
    """End the job `failed` if more samples failed than its `max_failures`; True if it did."""
    with transaction.atomic():
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.status != JobStatus.RUNNING:
            return False
        limit = failure_limit(job)
        if limit is None:
            return False
        failed = SeedRun.objects.filter(job_id=job_id, status=SeedStatus.FAILED)
        count = failed.count()
        if count <= limit:
            return False
        errors = Counter(failed.values_list("error", flat=True))
        common, times = errors.most_common(1)[0]
        job.status = JobStatus.FAILED
        job.error = (
            f"{count} of {job.num_samples} samples failed, more than max_failures "
            f"({limit}); most common error ({times}x): {common}"
        )
        job.completed_at = timezone.now()
        job.save(update_fields=["status", "error", "completed_at"])
    job_close(
        job_id=job_id, status=SeedStatus.CANCELLED, error=STOPPED, now=job.completed_at,
        event=(EventType.JOB_FAILED, {"error": job.error}), ended=True,
    )  # fmt: skip
    return True
