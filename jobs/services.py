"""A job's life: create, start, cancel, fail, finish, and the periodic re-dispatch of jobs
nobody works on. Views, tasks and the runner call these; the worker's claims and leases on
seed runs are in jobs.leases, the events clients follow in jobs.events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from evalhub import crypto
from jobs.bulk import seed_runs_insert
from jobs.dispatch import job_dispatch, job_traces_zip_dispatch
from jobs.ending import CANCEL, job_end
from jobs.events import EventType, job_event_append
from jobs.leases import leases_of_lost_workers_release
from jobs.locks import FINISHING, job_lock_try
from jobs.models import (
    CONNECTION_ERROR_PREFIX,
    ENDING_JOBS,
    EvalJob,
    JobStatus,
    SeedRun,
    SeedStatus,
)


@dataclass(frozen=True)
class JobSpec:
    """A validated job request (see jobs.api.jobs.JobCreateInput)."""

    task_app_url: str
    seeds: list[int]
    task_app_api_key: str | None = None
    app_id: str | None = None
    env_name: str | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)
    verifier_config: dict[str, Any] | None = None
    mode: str = "eval"
    max_concurrent: int = 5
    timeout: float = 600.0
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    rollout_limits: dict[str, Any] | None = None
    repeats: int = 1
    pass_threshold: float = 1.0
    max_failures: float | None = None
    name: str = ""
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    parent_job_id: str | None = None
    task_app_kind: str = "synth"
    # The job whose recorded LLM answers this one replays, and what a miss gets (jobs.replays).
    replay_of_id: str | None = None
    replay_on_miss: str = ""
    # Identical calls answered with an earlier answer: {scope, ttl_s} (docs/replay.md).
    cache: dict[str, Any] | None = None
    # What the request held that evalhub did not use (jobs.fields.unknown_fields): kept in the
    # job's `created` event and shown with the job (jobs.public.job_warnings).
    warnings: list[dict[str, Any]] = field(default_factory=list)


class IdempotencyConflict(Exception):
    """The idempotency key was used before, for a different request."""

    def __init__(self, job: EvalJob):
        super().__init__(job.id)
        self.job = job


def job_create(*, owner: AbstractBaseUser, spec: JobSpec) -> EvalJob:
    """Create the job and one pending seed run per seed, then hand it to the workers."""
    return _job_create(owner, spec, "", "")


def job_create_once(
    *, owner: AbstractBaseUser, spec: JobSpec, idempotency_key: str, fingerprint: str
) -> tuple[EvalJob, bool]:
    """`job_create`, once per `idempotency_key` of the owner: a retry gets the job the key
    made before (the second value says whether this call created it); the same key with a
    request of another `fingerprint` raises IdempotencyConflict."""
    earlier = _job_of_key(owner, idempotency_key, fingerprint)
    if earlier is not None:
        return earlier, False
    try:
        return _job_create(owner, spec, idempotency_key, fingerprint), True
    except IntegrityError:
        earlier = _job_of_key(owner, idempotency_key, fingerprint)  # a concurrent retry won
        if earlier is None:
            raise
        return earlier, False


def _job_of_key(owner, key: str, fingerprint: str) -> EvalJob | None:
    earlier = EvalJob.objects.filter(owner=owner, idempotency_key=key).first()
    if earlier is not None and earlier.request_fingerprint != fingerprint:
        raise IdempotencyConflict(earlier)
    return earlier


def _job_create(owner, spec: JobSpec, idempotency_key: str, fingerprint: str) -> EvalJob:
    with transaction.atomic():
        job = EvalJob.objects.create(
            owner=owner,
            idempotency_key=idempotency_key,
            request_fingerprint=fingerprint,
            task_app_url=spec.task_app_url,
            task_app_kind=spec.task_app_kind,
            task_app_api_key_encrypted=(
                crypto.encrypt(spec.task_app_api_key) if spec.task_app_api_key else ""
            ),
            app_id=spec.app_id,
            env_name=spec.env_name,
            policy=spec.policy,
            env_config=spec.env_config,
            verifier_config=spec.verifier_config,
            mode=spec.mode,
            max_concurrent=spec.max_concurrent,
            timeout_s=spec.timeout,
            max_cost_usd=spec.max_cost_usd,
            max_tokens=spec.max_tokens,
            rollout_limits=spec.rollout_limits,
            num_seeds=len(spec.seeds),
            num_samples=len(spec.seeds) * spec.repeats,
            replay_of_id=spec.replay_of_id,
            replay_on_miss=spec.replay_on_miss,
            cache=spec.cache,
            **job_numbers_fields(spec),
        )
        seed_runs_insert(job=job, seeds=spec.seeds, repeats=spec.repeats)  # jobs.bulk
        job_event_append(
            job_id=job.id,
            type=EventType.JOB_CREATED,
            data={
                "num_seeds": job.num_seeds,
                "num_samples": job.num_samples,
                **({"warnings": spec.warnings} if spec.warnings else {}),
            },
        )
        transaction.on_commit(lambda: job_dispatch(job.id))
    return job


def job_numbers_fields(spec: JobSpec) -> dict[str, Any]:
    """The job's fields for repeats, passing, stopping and finding it again."""
    return {
        "repeats": spec.repeats,
        "pass_threshold": spec.pass_threshold,
        "max_failures": spec.max_failures,
        "name": spec.name,
        "tags": spec.tags,
        "metadata": spec.metadata,
        "parent_job_id": spec.parent_job_id,
    }


def job_cancel(*, job: EvalJob) -> EvalJob:
    """Stop the job: no new claims, its open samples closed (`jobs.ending.job_end`). Workers
    abort what is in flight when they next look at the job (every POLL_S)."""
    ended, _ = job_end(job_id=job.pk, end=lambda _job: CANCEL)
    return ended if ended is not None else job


def job_start(*, job_id: str) -> EvalJob | None:
    """pending -> running. Returns the job if it is (now) running, None if it is over or gone."""
    now = timezone.now()
    EvalJob.objects.filter(pk=job_id, status=JobStatus.PENDING, completed_at__isnull=True).update(
        status=JobStatus.RUNNING, started_at=now, runner_seen_at=now
    )
    job = EvalJob.objects.filter(pk=job_id).first()
    if job is None or job.status != JobStatus.RUNNING:
        return None
    return job


def job_fail(*, job_id: str, error: str) -> bool:
    """The job could not run at all: failed, its open samples failed with the same error
    (`jobs.ending.job_end`). Whether this call failed it (False: it was over already)."""
    return job_end(job_id=job_id, end=lambda _job: error)[1]


def job_heartbeat(*, job_id: str) -> str | None:
    """A runner's sign of life; returns the job's status (None when the job is gone)."""
    EvalJob.objects.filter(pk=job_id).update(runner_seen_at=timezone.now())
    return EvalJob.objects.filter(pk=job_id).values_list("status", flat=True).first()


def job_finish_if_done(
    *, job_id: str, summarize: Callable[[EvalJob], dict[str, Any]]
) -> str | None:
    """When no seed is pending or running any more, end the job: `completed`, or `failed` when
    not one seed succeeded and every one failed because the task app could not be reached.
    `summarize` gives the summary the `completed` event carries (it sums LLM calls, which is
    traces' business: the worker passes `traces.results.result_rows.job_summary`). Returns the
    new status, or None when the job is not finished (or someone else ends it).

    Once no sample is open its rows no longer change, so the summary (a pass over every row:
    seconds for 100,000 samples) is made before the job row's lock is taken, not under it: on
    SQLite a transaction holds the whole database's write lock, and every recorded LLM call and
    every other job's result would wait for it. On PostgreSQL it is made by one process at a
    time (`jobs.locks.FINISHING`): others seeing the job over meanwhile leave it to that one."""
    if EvalJob.objects.filter(ENDING_JOBS, pk=job_id).exists():  # its ender stopped half-way
        job, _ = job_end(job_id=job_id)
        return job.status if job is not None else None
    with job_lock_try(FINISHING, job_id) as ours:
        job = EvalJob.objects.filter(pk=job_id).first()
        if not ours or job is None or not _finishable(job):
            return None
        return _finish(job, summarize)


def _finish(job: EvalJob, summarize: Callable[[EvalJob], dict[str, Any]]) -> str | None:
    job_id = job.id
    unreachable = _every_seed_unreachable(job_id)
    summary = None if unreachable else json.loads(json.dumps(summarize(job), default=str))
    with transaction.atomic():
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or not _finishable(job):  # someone else ended it meanwhile
            return None
        job.completed_at = timezone.now()
        # Its zip will not change any more: a worker builds it now, not the first download.
        transaction.on_commit(lambda: job_traces_zip_dispatch(job_id))
        if unreachable is not None:
            job.status = JobStatus.FAILED
            job.error = f"every seed failed: {unreachable}"
            job.save(update_fields=["status", "error", "completed_at"])
            job_event_append(job_id=job_id, type=EventType.JOB_FAILED, data={"error": job.error})
        else:
            job.status = JobStatus.COMPLETED
            job.save(update_fields=["status", "completed_at"])
            job_event_append(job_id=job_id, type=EventType.JOB_COMPLETED, data={"summary": summary})
    return job.status


def _finishable(job: EvalJob) -> bool:
    """Running, not ending, and no sample left open: its rows are final."""
    if job.status != JobStatus.RUNNING or job.is_ending:
        return False
    return not SeedRun.objects.filter(job_id=job.id).open().exists()


def _every_seed_unreachable(job_id: str) -> str | None:
    """The first seed's error when every seed failed because the task app could not be
    reached (the job then fails), else None."""
    ended = list(
        SeedRun.objects.filter(job_id=job_id).order_by("seed").values_list("error", flat=True)[:1]
    )
    reachable = SeedRun.objects.filter(job_id=job_id).exclude(
        status=SeedStatus.FAILED, error__startswith=CONNECTION_ERROR_PREFIX
    )
    return ended[0] if ended and not reachable.exists() else None


def jobs_redispatch(*, now=None, live: set[str] | None = None) -> list[str]:
    """Jobs nobody works on any more: not over (samples left to run or judge, or none left
    and the job not ended: the worker that wrote its last result died before ending it; a
    runner handed it ends it), and no runner has shown a sign of life (nor has the job been
    handed out) for a lease period; and, when
    `live` names the worker processes alive ("host:pid", from their heartbeats), the jobs
    whose leases were held by a worker that is not: those leases end now. Marks them
    dispatched and returns their ids; the caller enqueues them. A job left ending for a lease
    period (its ender stopped half-way, jobs.ending) is finished here."""
    now = now or timezone.now()
    lost = set()
    if live is not None:
        lost = leases_of_lost_workers_release(live=live, now=now)
        EvalJob.objects.filter(pk__in=lost).update(dispatched_at=now)
    stale = now - timedelta(seconds=settings.EVALHUB_LEASE_S)
    # Ending for a lease period: the process ending them stopped half-way; finished here.
    for job_id in EvalJob.objects.filter(ENDING_JOBS, completed_at__lt=stale).values_list(
        "id", flat=True
    ):
        job_end(job_id=job_id)
    candidates = (
        EvalJob.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        .filter(Q(runner_seen_at__isnull=True) | Q(runner_seen_at__lt=stale))
        .filter(Q(dispatched_at__isnull=True, created_at__lt=stale) | Q(dispatched_at__lt=stale))
        .values_list("id", flat=True)
    )
    job_ids = []
    for job_id in candidates:
        # Conditional, so two schedulers never hand out the same job twice in one period.
        if (
            EvalJob.objects.filter(pk=job_id)
            .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=stale))
            .update(dispatched_at=now)
        ):
            job_ids.append(job_id)
    return sorted(lost | set(job_ids))
