"""Stopping a broken job early: once more samples have failed than the job's `max_failures`
allows, the job ends `failed` with an error saying how many failed and the most common error,
and the samples not yet over end `cancelled` (no further rollout is sent: claims need a running
job, and the runners abort what is in flight when they see the job is over)."""

from __future__ import annotations

import math
from collections import Counter

from jobs.ending import MARK, job_end
from jobs.models import EvalJob, JobStatus, SeedRun, SeedStatus


def failure_limit(job: EvalJob) -> int | None:
    """How many failed samples the job tolerates (None: any number)."""
    if job.max_failures is None:
        return None
    if job.max_failures >= 1:
        return int(job.max_failures)
    return math.floor(job.max_failures * job.num_samples)


def job_stop_if_broken(*, job_id: str) -> bool:
    """End the job `failed` if more samples failed than its `max_failures`, its open samples
    cancelled (`jobs.ending.job_end`); True if this call stopped it."""

    def broken(job: EvalJob) -> str | None:
        return _broken(job) if job.status == JobStatus.RUNNING else None

    return job_end(job_id=job_id, end=broken)[1]


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
