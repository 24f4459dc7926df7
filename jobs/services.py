"""Writes on eval jobs: create, cancel, record events. Views and tasks call these."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, Exists, F, Max, OuterRef, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from evalhub import crypto
from jobs.models import (
    AttemptStatus,
    EvalJob,
    JobEvent,
    JobStatus,
    RolloutAttempt,
    SeedRun,
    SeedStatus,
)

SEED_RUN_BATCH = 2000


@dataclass(frozen=True)
class JobSpec:
    """A validated job request (see jobs.api.JobCreateInput)."""

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


def job_create(*, owner: AbstractBaseUser, spec: JobSpec) -> EvalJob:
    """Create the job and one pending seed run per seed, then hand it to the workers."""
    with transaction.atomic():
        job = EvalJob.objects.create(
            owner=owner,
            task_app_url=spec.task_app_url,
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
            num_seeds=len(spec.seeds),
        )
        SeedRun.objects.bulk_create(
            (SeedRun(job=job, seed=seed) for seed in spec.seeds), batch_size=SEED_RUN_BATCH
        )
        job_event_append(
            job_id=job.id, type="eval.policy.job.created", data={"num_seeds": len(spec.seeds)}
        )
        transaction.on_commit(lambda: _dispatch(job.id))
    return job


def _dispatch(job_id: str) -> None:
    # Imported here: tasks import services, and the Celery app needs Django set up first.
    from jobs.tasks import job_run

    # One message per runner wanted: several workers share a big job by claiming from its rows.
    for _ in range(settings.EVALHUB_JOB_FANOUT):
        job_run.delay(job_id)


def job_cancel(*, job: EvalJob) -> EvalJob:
    """Stop the job: no new claims, pending seeds cancelled. Workers abort what is in flight
    when they next look at the job (they check it every second or so)."""
    with transaction.atomic():
        job = EvalJob.objects.select_for_update().get(pk=job.pk)
        if job.is_terminal:
            return job
        now = timezone.now()
        job.status = JobStatus.CANCELLED
        job.cancel_requested_at = now
        job.completed_at = now
        job.save(update_fields=["status", "cancel_requested_at", "completed_at"])
        SeedRun.objects.filter(job=job, status=SeedStatus.PENDING).update(
            status=SeedStatus.CANCELLED, finished_at=now, error="cancelled"
        )
        job_event_append(job_id=job.id, type="eval.policy.job.cancelled", data={})
    return job


def job_event_append(
    *, job_id: str, type: str, data: dict[str, Any], message: str = ""
) -> JobEvent:
    """Append an event with the next sequence number of the job (1, 2, ...)."""
    payload = dict(data)
    if message:
        payload.setdefault("message", message)
    for _ in range(10):
        try:
            with transaction.atomic():
                last = JobEvent.objects.filter(job_id=job_id).aggregate(m=Max("seq"))["m"] or 0
                return JobEvent.objects.create(job_id=job_id, seq=last + 1, type=type, data=payload)
        except IntegrityError:
            continue  # another process took that number; read again
    raise RuntimeError(f"could not append event {type} to job {job_id}")


# --- Workers: job lifecycle, claims, leases, results ----------------------------------------
#
# Every write a worker makes is conditional on what it believes (the job is still running, it
# still holds the seed's lease) and checks the row count, so a duplicated task, a worker whose
# lease was taken over or a cancel racing with a result can never produce a second result.

CONNECTION_ERROR_PREFIX = "task app unreachable"


@dataclass(frozen=True)
class SeedResult:
    """What a finished rollout wrote into its seed run."""

    score: float | None = None
    reward_mean: float | None = None
    outcome_score: float | None = None
    events_score: float | None = None
    verifier_score: float | None = None
    metrics: dict[str, Any] | None = None
    task_trace: Any = None
    latency_ms: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class AttemptEnd:
    """How a rollout attempt ended; written with the seed's update, in one transaction."""

    attempt_id: int
    status: str
    http_status: int | None = None
    error: str | None = None
    latency_ms: float | None = None


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
    """The job could not run at all: failed, unfinished seeds failed with the same error."""
    now = timezone.now()
    with transaction.atomic():
        updated = EvalJob.objects.filter(
            pk=job_id, status__in=[JobStatus.PENDING, JobStatus.RUNNING]
        ).update(status=JobStatus.FAILED, error=error, completed_at=now)
        if not updated:
            return False
        SeedRun.objects.filter(
            job_id=job_id, status__in=[SeedStatus.PENDING, SeedStatus.RUNNING]
        ).update(
            status=SeedStatus.FAILED, error=error, finished_at=now, lease_owner="",
            lease_expires_at=None,
        )  # fmt: skip
        RolloutAttempt.objects.filter(seed_run__job_id=job_id, status=AttemptStatus.RUNNING).update(
            status=AttemptStatus.ABANDONED, finished_at=now, error=error
        )
        job_event_append(job_id=job_id, type="eval.policy.job.failed", data={"error": error})
    return True


def job_heartbeat(*, job_id: str) -> str | None:
    """A runner's sign of life; returns the job's status (None when the job is gone)."""
    EvalJob.objects.filter(pk=job_id).update(runner_seen_at=timezone.now())
    return EvalJob.objects.filter(pk=job_id).values_list("status", flat=True).first()


def job_finish_if_done(*, job_id: str) -> str | None:
    """When no seed is pending or running any more, end the job: `completed`, or `failed` when
    not one seed succeeded and every one failed because the task app could not be reached.
    Returns the new status, or None when the job is not finished (or someone else ended it)."""
    from traces import totals

    with transaction.atomic():
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.status != JobStatus.RUNNING:
            return None
        open_seeds = SeedRun.objects.filter(
            job_id=job_id, status__in=[SeedStatus.PENDING, SeedStatus.RUNNING]
        )
        if open_seeds.exists():
            return None
        summary, rows = totals.job_results(job=job)
        unreachable = bool(rows) and all(
            r["status"] == SeedStatus.FAILED
            and (r["error"] or "").startswith(CONNECTION_ERROR_PREFIX)
            for r in rows
        )
        now = timezone.now()
        job.completed_at = now
        if unreachable:
            job.status = JobStatus.FAILED
            job.error = f"every seed failed: {rows[0]['error']}"
            job.save(update_fields=["status", "error", "completed_at"])
            job_event_append(
                job_id=job_id, type="eval.policy.job.failed", data={"error": job.error}
            )
        else:
            job.status = JobStatus.COMPLETED
            job.save(update_fields=["status", "completed_at"])
            job_event_append(
                job_id=job_id,
                type="eval.policy.job.completed",
                data={"summary": json.loads(json.dumps(summary, default=str))},
            )
    return job.status


def seed_run_claim(*, job_id: str, worker: str, limit: int, lease_s: float) -> list[SeedRun]:
    """Claim up to `limit` seed runs of a running job for `worker`, never more than the job's
    `max_concurrent` held under live leases over all workers. Claimable: pending seeds whose
    backoff is over, and running seeds whose lease expired (their worker is gone)."""
    if limit <= 0:
        return []
    now = timezone.now()
    with transaction.atomic():
        # The job row lock serializes claims on one job across workers (PostgreSQL); SQLite
        # takes its write lock when the transaction begins (transaction_mode IMMEDIATE).
        # NO KEY: inserting an event takes a key-share lock on the job row, which must not
        # wait for a claim (a claim may wait for that event's seed row: a deadlock).
        job = EvalJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        if job is None or job.status != JobStatus.RUNNING:
            return []
        seeds = SeedRun.objects.filter(job_id=job_id)
        in_flight = seeds.filter(status=SeedStatus.RUNNING, lease_expires_at__gt=now).count()
        slots = min(limit, job.max_concurrent - in_flight)
        if slots <= 0:
            return []
        max_attempts = settings.EVALHUB_ROLLOUT_MAX_ATTEMPTS
        expired = list(
            seeds.filter(status=SeedStatus.RUNNING, lease_expires_at__lte=now)
            .order_by("id")
            .values_list("id", "attempts")[:slots]
        )
        if expired:
            _attempts_abandon(
                seed_run_ids=[i for i, _ in expired], error="the worker running it stopped"
            )
            spent = [i for i, n in expired if n >= max_attempts]
            if spent:
                _seed_runs_fail_spent(seed_run_ids=spent, job_id=job_id, now=now)
        ids = [i for i, n in expired if n < max_attempts]
        if len(ids) < slots:
            ids += list(
                seeds.filter(status=SeedStatus.PENDING)
                .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
                .order_by("id")
                .values_list("id", flat=True)[: slots - len(ids)]
            )
        if not ids:
            return []
        claimed = SeedRun.objects.filter(pk__in=ids).filter(
            Q(status=SeedStatus.PENDING) | Q(status=SeedStatus.RUNNING, lease_expires_at__lte=now)
        )
        claimed.update(
            status=SeedStatus.RUNNING,
            lease_owner=worker,
            lease_expires_at=now + timedelta(seconds=lease_s),
            attempts=F("attempts") + 1,
            not_before=None,
            started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
        )
        return list(SeedRun.objects.filter(pk__in=ids, lease_owner=worker).order_by("id"))


def _attempts_abandon(*, seed_run_ids: list[int], error: str) -> None:
    RolloutAttempt.objects.filter(
        seed_run_id__in=seed_run_ids, status=AttemptStatus.RUNNING
    ).update(status=AttemptStatus.ABANDONED, finished_at=timezone.now(), error=error)


def _seed_runs_fail_spent(*, seed_run_ids: list[int], job_id: str, now) -> None:
    error = "every attempt was lost with its worker (lease expired)"
    for seed_run in SeedRun.objects.filter(pk__in=seed_run_ids):
        seed_run.status = SeedStatus.FAILED
        seed_run.error = error
        seed_run.finished_at = now
        seed_run.lease_owner = ""
        seed_run.lease_expires_at = None
        seed_run.save(
            update_fields=["status", "error", "finished_at", "lease_owner", "lease_expires_at"]
        )
        _seed_event(seed_run)


def seed_run_lease_renew(*, seed_run_ids: list[int], worker: str, lease_s: float) -> set[int]:
    """Extend the leases `worker` still holds; returns the ids it holds (a seed that is missing
    was cancelled or taken over: its rollout must stop)."""
    if not seed_run_ids:
        return set()
    held = SeedRun.objects.filter(
        pk__in=seed_run_ids, status=SeedStatus.RUNNING, lease_owner=worker
    )
    held.update(lease_expires_at=timezone.now() + timedelta(seconds=lease_s))
    return set(held.values_list("id", flat=True))


def rollout_attempt_start(
    *, seed_run: SeedRun, token_hash: str, worker: str = ""
) -> RolloutAttempt:
    """Record the start of attempt number `seed_run.attempts` with a fresh run id."""
    return RolloutAttempt.objects.create(
        seed_run=seed_run,
        worker=worker,
        number=seed_run.attempts,
        run_id=f"run-{secrets.token_hex(12)}",
        token_hash=token_hash,
        status=AttemptStatus.RUNNING,
        started_at=timezone.now(),
    )


def rollout_attempt_finish(*, end: AttemptEnd) -> None:
    RolloutAttempt.objects.filter(pk=end.attempt_id, status=AttemptStatus.RUNNING).update(
        status=end.status,
        http_status=end.http_status,
        error=end.error,
        latency_ms=end.latency_ms,
        finished_at=timezone.now(),
    )


def _held_seed_runs(*, seed_run_ids: list[int], worker: str):
    """The seed runs `worker` still holds; results are written only through this."""
    return SeedRun.objects.filter(
        pk__in=seed_run_ids, status=SeedStatus.RUNNING, lease_owner=worker
    )


def _release(held, **fields) -> int:
    """Update the held seed runs and give their leases up."""
    return held.update(lease_owner="", lease_expires_at=None, **fields)


def seed_run_finish(
    *,
    seed_run_id: int,
    worker: str,
    status: str,
    result: SeedResult,
    attempt: AttemptEnd | None = None,
) -> bool:
    """Write the seed's one result, if `worker` still holds it; records the seed event (and
    how the attempt ended, which is recorded either way: it was spent)."""
    with transaction.atomic():
        if attempt is not None:
            rollout_attempt_finish(end=attempt)
        updated = _release(
            _held_seed_runs(seed_run_ids=[seed_run_id], worker=worker),
            status=status,
            score=result.score,
            reward_mean=result.reward_mean,
            outcome_score=result.outcome_score,
            events_score=result.events_score,
            verifier_score=result.verifier_score,
            metrics=result.metrics,
            task_trace=result.task_trace,
            latency_ms=result.latency_ms,
            error=result.error,
            finished_at=timezone.now(),
        )
        if updated:
            _seed_event(SeedRun.objects.get(pk=seed_run_id))
    return bool(updated)


def seed_run_retry_later(
    *,
    seed_run_id: int,
    worker: str,
    delay_s: float,
    error: str,
    attempt: AttemptEnd | None = None,
) -> bool:
    """Give the seed back (pending) after a transient failure; no worker may start it before
    `delay_s` seconds have passed."""
    now = timezone.now()
    with transaction.atomic():
        if attempt is not None:
            rollout_attempt_finish(end=attempt)
        updated = _release(
            _held_seed_runs(seed_run_ids=[seed_run_id], worker=worker),
            status=SeedStatus.PENDING,
            not_before=now + timedelta(seconds=delay_s),
            error=error,
        )
    return bool(updated)


def seed_runs_cancel(*, seed_run_ids: list[int], worker: str) -> int:
    """The job was cancelled while `worker` ran these: mark them and their attempts cancelled."""
    now = timezone.now()
    with transaction.atomic():
        held = _held_seed_runs(seed_run_ids=seed_run_ids, worker=worker)
        ids = list(held.values_list("id", flat=True))
        _release(held, status=SeedStatus.CANCELLED, error="cancelled", finished_at=now)
        RolloutAttempt.objects.filter(seed_run_id__in=ids, status=AttemptStatus.RUNNING).update(
            status=AttemptStatus.CANCELLED, finished_at=now, error="cancelled"
        )
    return len(ids)


def jobs_redispatch(*, now=None) -> list[str]:
    """Jobs nobody works on any more: not over, seeds left to run, and no runner has shown a
    sign of life (nor has the job been handed out) for a lease period. Marks them dispatched
    and returns their ids; the caller enqueues them. Also tidies cancelled jobs whose running
    seeds lost their worker."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.EVALHUB_LEASE_S)
    open_seeds = SeedRun.objects.filter(
        job=OuterRef("pk"), status__in=[SeedStatus.PENDING, SeedStatus.RUNNING]
    )
    candidates = (
        EvalJob.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        .filter(Q(runner_seen_at__isnull=True) | Q(runner_seen_at__lt=stale))
        .filter(Q(dispatched_at__isnull=True, created_at__lt=stale) | Q(dispatched_at__lt=stale))
        .filter(Exists(open_seeds))
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
    # Running seeds of cancelled jobs whose worker died would otherwise stay running forever.
    orphans = SeedRun.objects.filter(
        job__status=JobStatus.CANCELLED, status=SeedStatus.RUNNING, lease_expires_at__lte=now
    )
    orphan_ids = list(orphans.values_list("id", flat=True))
    if orphan_ids:
        RolloutAttempt.objects.filter(
            seed_run_id__in=orphan_ids, status=AttemptStatus.RUNNING
        ).update(status=AttemptStatus.CANCELLED, finished_at=now, error="cancelled")
        SeedRun.objects.filter(pk__in=orphan_ids, status=SeedStatus.RUNNING).update(
            status=SeedStatus.CANCELLED, error="cancelled", finished_at=now, lease_owner="",
            lease_expires_at=None,
        )  # fmt: skip
    return job_ids


def _seed_event(seed_run: SeedRun) -> None:
    job_event_append(
        job_id=seed_run.job_id,
        type="eval.policy.seed.completed",
        data={
            "seed": seed_run.seed,
            "status": seed_run.status,
            "score": seed_run.score,
            "error": seed_run.error,
            "attempts": seed_run.attempts,
            "latency_ms": seed_run.latency_ms,
        },
    )
