"""Writes on eval jobs: create, cancel, record events. Views and tasks call these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from evalhub import crypto
from jobs.models import EvalJob, JobEvent, JobStatus, SeedRun, SeedStatus

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
