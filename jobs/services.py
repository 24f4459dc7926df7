"""A job's life: create, start, cancel, fail, finish, and the periodic re-dispatch of jobs
nobody works on. Views, tasks and the runner call these; the worker's claims and leases on
seed runs are in jobs.leases, the events clients follow in jobs.events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from evalhub import crypto, revocations
from jobs.bulk import seed_runs_insert
from jobs.dispatch import job_dispatch, job_traces_zip_dispatch
from jobs.events import EventType, job_event_append
from jobs.leases import leases_of_lost_workers_release
from jobs.models import (
    CONNECTION_ERROR_PREFIX,
    OPEN_JUDGE_STATUSES,
    AttemptStatus,
    EvalJob,
    JobStatus,
    JudgeStatus,
    RolloutAttempt,
    SeedRun,
    SeedStatus,
)

CANCEL_TRIES = 5
_T = TypeVar("_T")


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
    """Stop the job: no new claims, its open samples closed (`job_close`). Workers abort
    what is in flight when they next look at the job (every POLL_S). Never fails for
    contention: a transaction the database chose to break is tried again."""
    return _tried_again(lambda: _job_cancel(job_id=job.pk))


def _job_cancel(*, job_id: str) -> EvalJob:
    with transaction.atomic():
        # NO KEY, like every other lock on the job row: workers inserting events and seed
        # results take key-share locks on it, which a plain FOR UPDATE would wait for.
        job = EvalJob.objects.select_for_update(no_key=True).get(pk=job_id)
        ended = not job.is_terminal
        if ended:
            now = timezone.now()
            job.status = JobStatus.CANCELLED
            job.cancel_requested_at = now
            job.completed_at = now
            job.save(update_fields=["status", "cancel_requested_at", "completed_at"])
    if job.status == JobStatus.CANCELLED:  # and again for a cancel that stopped half-way
        _job_close(job.id, SeedStatus.CANCELLED, "cancelled", job.completed_at,
                   (EventType.JOB_CANCELLED, {}), ended)  # fmt: skip
    return job


def _tried_again(call: Callable[[], _T]) -> _T:
    """`call()`, tried again when the database breaks its transaction (a deadlock or a
    serialization failure with workers writing meanwhile); the last try raises what it meets."""
    for attempt in range(1, CANCEL_TRIES):
        try:
            return call()
        except OperationalError:
            time.sleep(0.05 * attempt)
    return call()


def job_close(
    *,
    job_id: str,
    status: str,
    error: str,
    now,
    event: tuple[EventType, dict[str, Any]],
    ended: bool,
) -> int:
    """Close every open sample of a job that ended early (cancelled, failed, stopped for
    `max_failures`), by one rule, and append the job's `event`: its rollouts, pending or
    running, end `status` with `error` and give their leases up (a runner still at work on
    one can write nothing more: every write of a result needs the lease, jobs.leases); their
    running attempts end `cancelled` (so their interceptor URLs close); open judgements end
    `cancelled`. Returns the number of rollouts closed.

    Call it once the transaction that ended the job (under the job row's lock) has
    committed, never inside it: a worker writing a batch of results holds its attempts' and
    seeds' rows when it waits for the job row (to claim the next rollouts), so closing them
    while holding the job row waits for that worker while it waits for us, a deadlock on
    PostgreSQL. Once the job is over no claim takes a seed (claims need a running job), so
    what is open now is all there will be. The event goes with the samples, not with the
    job's status, for the same reason (its number may wait for a worker's event). `ended`:
    the caller just ended the job; else the event is appended only when something was still
    open (a close that stopped half-way, finished by calling this again). Tried again when
    the database breaks its transaction (a deadlock with a worker's multi-row write)."""
    return _tried_again(lambda: _job_close(job_id, status, error, now, event, ended))


def _job_close(job_id: str, status: str, error: str, now, event, ended: bool) -> int:
    with transaction.atomic():
        samples = SeedRun.objects.filter(job_id=job_id)
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
        judged = samples.filter(judge_status__in=OPEN_JUDGE_STATUSES).update(
            judge_status=JudgeStatus.CANCELLED, judge_lease_owner="", judge_lease_expires_at=None,
            verifier_error=error,
        )  # fmt: skip
        if ended or closed or judged:
            job_event_append(job_id=job_id, type=event[0], data=event[1])
    return closed


def job_start(*, job_id: str) -> EvalJob | None:
    """pending -> running. Returns the job if it is (now) running, None if it is over or gone."""
    now = timezone.now()
    EvalJob.objects.filter(pk=job_id, status=JobStatus.PENDING).update(
        status=JobStatus.RUNNING, started_at=now, runner_seen_at=now
    )
    job = EvalJob.objects.filter(pk=job_id).first()
    if job is None or job.status != JobStatus.RUNNING:
        return None
    return job


def job_fail(*, job_id: str, error: str) -> bool:
    """The job could not run at all: failed, unfinished seeds failed with the same error.
    Called again for a failed job (a runner's database call tried again), it finishes the
    close of its samples if that stopped half-way."""
    now = timezone.now()
    updated = EvalJob.objects.filter(
        pk=job_id, status__in=[JobStatus.PENDING, JobStatus.RUNNING]
    ).update(status=JobStatus.FAILED, error=error, completed_at=now)
    if not updated and not EvalJob.objects.filter(pk=job_id, status=JobStatus.FAILED).exists():
        return False
    job_close(
        job_id=job_id, status=SeedStatus.FAILED, error=error, now=now,
        event=(EventType.JOB_FAILED, {"error": error}), ended=bool(updated),
    )  # fmt: skip
    return bool(updated)


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
    traces' business: the worker passes `traces.results.totals.job_summary`). Returns the new status,
    or None when the job is not finished (or someone else ended it)."""
    with transaction.atomic():
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.status != JobStatus.RUNNING:
            return None
        if SeedRun.objects.filter(job_id=job_id).open().exists():
            return None
        ended = list(
            SeedRun.objects.filter(job_id=job_id)
            .order_by("seed")
            .values_list("status", "error")[:1]
        )
        reachable = SeedRun.objects.filter(job_id=job_id).exclude(
            status=SeedStatus.FAILED, error__startswith=CONNECTION_ERROR_PREFIX
        )
        unreachable = bool(ended) and not reachable.exists()
        now = timezone.now()
        job.completed_at = now
        # Its zip will not change any more: a worker builds it now, not the first download.
        transaction.on_commit(lambda: job_traces_zip_dispatch(job_id))
        if unreachable:
            job.status = JobStatus.FAILED
            job.error = f"every seed failed: {ended[0][1]}"
            job.save(update_fields=["status", "error", "completed_at"])
            job_event_append(job_id=job_id, type=EventType.JOB_FAILED, data={"error": job.error})
        else:
            job.status = JobStatus.COMPLETED
            job.save(update_fields=["status", "completed_at"])
            job_event_append(
                job_id=job_id,
                type=EventType.JOB_COMPLETED,
                data={"summary": json.loads(json.dumps(summarize(job), default=str))},
            )
    return job.status


def jobs_redispatch(*, now=None, live: set[str] | None = None) -> list[str]:
    """Jobs nobody works on any more: not over, samples left to run or judge, and no runner
    has shown a sign of life (nor has the job been handed out) for a lease period; and, when
    `live` names the worker processes alive ("host:pid", from their heartbeats), the jobs
    whose leases were held by a worker that is not: those leases end now. Marks them
    dispatched and returns their ids; the caller enqueues them."""
    now = now or timezone.now()
    lost = set()
    if live is not None:
        lost = leases_of_lost_workers_release(live=live, now=now)
        EvalJob.objects.filter(pk__in=lost).update(dispatched_at=now)
    stale = now - timedelta(seconds=settings.EVALHUB_LEASE_S)
    candidates = (
        EvalJob.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        .filter(Q(runner_seen_at__isnull=True) | Q(runner_seen_at__lt=stale))
        .filter(Q(dispatched_at__isnull=True, created_at__lt=stale) | Q(dispatched_at__lt=stale))
        .filter(Exists(SeedRun.objects.filter(job=OuterRef("pk")).open()))
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
