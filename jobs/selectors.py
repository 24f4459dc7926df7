"""Reads on eval jobs: lists, progress, events, seed runs. (Usage, cost and the results
summary are sums over LLM calls: `traces.results.totals`.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Avg, Count, FloatField, OuterRef, Q, QuerySet, Subquery
from django.http import Http404

from jobs.events import EventType
from jobs.models import EvalJob, JobEvent, SeedRun, SeedStatus
from jobs.scores import score_or_zero_sql

Row = TypeVar("Row")


def job_owned(*, owner: AbstractBaseUser, job_id: str, field: str = "") -> EvalJob:
    """The owner's job; 404 for a job that is not there or belongs to someone else (the API,
    its event stream and the dashboard answer both the same, so nobody learns which ids
    exist). `field`: the request's field that named the job, said in the 404."""
    # A NUL cannot be in any id, and PostgreSQL refuses to even compare one.
    job = None if "\x00" in job_id else EvalJob.objects.filter(owner=owner, pk=job_id).first()
    if job is None:
        raise Http404(f"{field}: no such job." if field else "No such job.")
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
    """Progress of each job (in samples, `EvalJob.num_samples`), and its mean reward so far (None
    before the first sample ends), counted by the database in two queries for all of them."""
    counts: dict[str, dict[str, int]] = {job.id: {} for job in jobs}
    for job_id, status, n in (
        SeedRun.objects.filter(job_id__in=list(counts))
        .values_list("job_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts[job_id][status] = n
    means = job_mean_scores(job_ids=list(counts))
    return {
        job.id: _progress(job=job, counts=counts[job.id], mean_reward=means.get(job.id))
        for job in jobs
    }


def job_mean_scores(*, job_ids: list[str]) -> dict[str, float]:
    """Mean score of each job as its summary counts it (jobs.stats): over the finished
    samples, a failed one (or one without a score) counting 0 (absent: nothing finished yet)."""
    return dict(
        SeedRun.objects.filter(
            job_id__in=job_ids, status__in=[SeedStatus.SUCCEEDED, SeedStatus.FAILED]
        )
        .values_list("job_id")
        .annotate(mean=Avg(score_or_zero_sql()))
        .order_by()
    )


def job_mean_score_sql() -> Subquery:
    """Per job, as the database computes it (for sorting), its mean score as `job_mean_scores`
    counts it; null before a sample finished."""
    finished = SeedRun.objects.filter(
        job=OuterRef("pk"), status__in=[SeedStatus.SUCCEEDED, SeedStatus.FAILED]
    )
    means = finished.values("job").annotate(mean=Avg(score_or_zero_sql())).values("mean")
    return Subquery(means.order_by(), output_field=FloatField())


def job_progress(*, job: EvalJob) -> dict[str, Any]:
    return job_progress_many(jobs=[job])[job.id]


def _progress(*, job: EvalJob, counts: dict[str, int], mean_reward: float | None) -> dict[str, Any]:
    succeeded = counts.get(SeedStatus.SUCCEEDED, 0)
    failed = counts.get(SeedStatus.FAILED, 0)
    return {
        "mean_reward": mean_reward,
        "completed": succeeded + failed,
        "total": job.num_samples,
        "succeeded": succeeded,
        "failed": failed,
        "cancelled": counts.get(SeedStatus.CANCELLED, 0),
        "running": counts.get(SeedStatus.RUNNING, 0),
        "pending": counts.get(SeedStatus.PENDING, 0),
    }


def job_events(*, job: EvalJob, since_seq: int = 0, limit: int = 200) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job=job, seq__gt=since_seq).order_by("seq")[:limit])


def job_created_data(*, job: EvalJob) -> dict[str, Any]:
    """The data of the job's `created` event (what was known of the request as it was made)."""
    data = (
        JobEvent.objects.filter(job=job, type=EventType.JOB_CREATED)
        .values_list("data", flat=True)
        .first()
    )
    return data if isinstance(data, dict) else {}


def seed_run_get(*, job: EvalJob, seed: int, repeat: int = 0) -> SeedRun | None:
    return SeedRun.objects.filter(job=job, seed=seed, repeat=repeat).first()


def seed_run_pages(
    seed_runs: QuerySet[SeedRun],
    *,
    size: int,
    read: Callable[[QuerySet[SeedRun]], list[Row]] = list,
    after: tuple[int, int] | None = None,
    limit: int | None = None,
) -> Iterator[list[Row]]:
    """The seed runs by seed and repeat, `size` at a time, each page as `read` makes it of its
    slice of the queryset (rows with a `seed` and a `repeat`): `keyset_pages` (a sample is
    unique by seed and repeat). `after`: the (seed, repeat) of the last row already read;
    `limit`: the most rows in all."""
    return keyset_pages(seed_runs, ("seed", "repeat"), size=size, read=read, after=after,
                        limit=limit)  # fmt: skip


def keyset_pages(
    rows: QuerySet,
    key: tuple[str, str],
    *,
    size: int,
    read: Callable[[QuerySet], list[Row]] = list,
    after: tuple[Any, Any] | None = None,
    limit: int | None = None,
) -> Iterator[list[Row]]:
    """`rows` ordered by the two fields of `key` (unique together), `size` at a time, each
    page as `read` makes it of its slice of the queryset (rows with those two attributes).
    Keyset pages: a page deep in a big set costs what the first one does. `after`: the key of
    the last row already read; `limit`: the most rows in all."""
    first, second = key
    rows = rows.order_by(first, second)
    left = limit
    while left is None or left > 0:
        page = rows
        if after is not None:
            page = page.filter(Q(**{f"{first}__gt": after[0]})
                               | Q(**{first: after[0], f"{second}__gt": after[1]}))  # fmt: skip
        wanted = size if left is None else min(left, size)
        got = read(page[:wanted])
        if got:
            yield got
        if len(got) < wanted:
            return
        after = (getattr(got[-1], first), getattr(got[-1], second))
        if left is not None:
            left -= len(got)
