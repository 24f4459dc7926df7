"""A job's numbered events (`JobEvent`): what clients follow through the API and the SSE stream."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Max

from jobs.models import EvalJob, JobEvent, SeedRun, SeedStatus


class EventType(models.TextChoices):
    """Every type of job event: the `type` of a `JobEvent`, the `event:` of the SSE stream."""

    JOB_CREATED = "eval.policy.job.created"
    SEED_COMPLETED = "eval.policy.seed.completed"
    JOB_COMPLETED = "eval.policy.job.completed"
    JOB_FAILED = "eval.policy.job.failed"
    JOB_CANCELLED = "eval.policy.job.cancelled"


# A job's last event: nothing follows one of these.
TERMINAL_EVENT_TYPES = frozenset(
    {EventType.JOB_COMPLETED, EventType.JOB_FAILED, EventType.JOB_CANCELLED}
)


def job_event_append(
    *, job_id: str, type: EventType, data: dict[str, Any], message: str = ""
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


def seed_event_append(*, seed_run: SeedRun) -> JobEvent:
    """The seed run is over: its event carries the result as it was written, and the job's
    progress (`completed` of `total` seeds), which stream followers show."""
    completed = SeedRun.objects.filter(
        job_id=seed_run.job_id, status__in=[SeedStatus.SUCCEEDED, SeedStatus.FAILED]
    ).count()
    sizes = EvalJob.objects.filter(pk=seed_run.job_id).values_list("num_seeds", "repeats").first()
    total = sizes[0] * sizes[1] if sizes else None
    return job_event_append(
        job_id=seed_run.job_id,
        type=EventType.SEED_COMPLETED,
        data={
            "seed": seed_run.seed,
            "repeat": seed_run.repeat,
            "status": seed_run.status,
            "score": seed_run.score,
            "error": seed_run.error,
            "attempts": seed_run.attempts,
            "latency_ms": seed_run.latency_ms,
            "completed": completed,
            "total": total,
        },
    )
