"""Reads on eval jobs: lists, progress, events, seed runs. (Usage, cost and the results
summary are sums over LLM calls: `traces.totals`.)"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Avg, Count, FloatField, Q, QuerySet
from django.db.models.functions import Coalesce
from django.http import Http404

from jobs.models import EvalJob, JobEvent, SeedRun, SeedStatus


def job_get_for_owner(*, owner: AbstractBaseUser, job_id: str) -> EvalJob | None:
    return EvalJob.objects.filter(owner=owner, pk=job_id).first()


def job_owned(*, owner: AbstractBaseUser, job_id: str) -> EvalJob:
    """The owner's job; 404 for a job that is not there or belongs to someone else (the API and
    the dashboard answer both the same, so nobody learns which ids exist)."""
    # A NUL cannot be in any id, and PostgreSQL refuses to even compare one.
    job = None if "\x00" in job_id else job_get_for_owner(owner=owner, job_id=job_id)
    if job is None:
        raise Http404("No such job.")
    return job


def job_list(
    *, owner: AbstractBaseUser, status: str | None = None, tag: str | None = None,
    q: str | None = None,
) -> QuerySet[EvalJob]:  # fmt: skip
    """The owner's jobs, newest first; `tag`: only jobs with that tag (any case); `q`: a search
    of names, app ids, env names and policy models (any case)."""
    jobs = EvalJob.objects.filter(owner=owner)
    if status:
        jobs = jobs.filter(status=status)
    if tag:
        # The tags' JSON text holds each tag quoted: a whole tag matches, not a part of one.
        jobs = jobs.filter(tags__icontains=json.dumps(tag))
    if q:
        jobs = jobs.filter(
            Q(name__icontains=q) | Q(app_id__icontains=q) | Q(env_name__icontains=q)
            | Q(policy__model__icontains=q)
        )  # fmt: skip
    return jobs.order_by("-created_at", "-id")


def job_progress_many(*, jobs: list[EvalJob]) -> dict[str, dict[str, Any]]:
    """Progress of each job (in samples: seeds x repeats), and its mean reward so far (None
    before the first sample ends), counted by the database in two queries for all of them."""
    counts: dict[str, dict[str, int]] = {job.id: {} for job in jobs}
    for job_id, status, n in (
        SeedRun.objects.filter(job_id__in=list(counts))
        .values_list("job_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts[job_id][status] = n
    # As the summary counts it (jobs.stats): a failed sample, or one without a score, is 0.
    means = dict(
        SeedRun.objects.filter(
            job_id__in=list(counts), status__in=[SeedStatus.SUCCEEDED, SeedStatus.FAILED]
        )
        .values_list("job_id")
        .annotate(mean=Avg(Coalesce("score", 0.0, output_field=FloatField())))
        .order_by()
    )
    return {
        job.id: _progress(job=job, counts=counts[job.id], mean_reward=means.get(job.id))
        for job in jobs
    }


def job_progress(*, job: EvalJob) -> dict[str, Any]:
    return job_progress_many(jobs=[job])[job.id]


def _progress(*, job: EvalJob, counts: dict[str, int], mean_reward: float | None) -> dict[str, Any]:
    succeeded = counts.get(SeedStatus.SUCCEEDED, 0)
    failed = counts.get(SeedStatus.FAILED, 0)
    return {
        "mean_reward": mean_reward,
        "completed": succeeded + failed,
        "total": job.num_seeds * job.repeats,
        "succeeded": succeeded,
        "failed": failed,
        "cancelled": counts.get(SeedStatus.CANCELLED, 0),
        "running": counts.get(SeedStatus.RUNNING, 0),
        "pending": counts.get(SeedStatus.PENDING, 0),
    }


def job_events(*, job: EvalJob, since_seq: int = 0, limit: int = 200) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job=job, seq__gt=since_seq).order_by("seq")[:limit])


def seed_run_get(*, job: EvalJob, seed: int, repeat: int = 0) -> SeedRun | None:
    return SeedRun.objects.filter(job=job, seed=seed, repeat=repeat).first()
