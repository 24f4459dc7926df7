"""The public shape of a job and its events: built here once, and used by the API, the
dashboard, the server-sent events and the traces zip's manifest."""

from __future__ import annotations

from typing import Any

from jobs import selectors
from jobs.models import EvalJob, JobEvent


def job_config(job: EvalJob) -> dict[str, Any]:
    """The job's configuration as shown to people: secrets appear as set/unset only."""
    return {
        "task_app_url": job.task_app_url,
        "task_app_api_key": "set" if job.has_task_app_api_key else None,
        "has_task_app_api_key": job.has_task_app_api_key,
        "app_id": job.app_id,
        "env_name": job.env_name,
        "seeds_count": job.num_seeds,
        "policy": job.policy,
        "env_config": job.env_config,
        "verifier_config": job.verifier_config,
        "mode": job.mode,
        "max_concurrent": job.max_concurrent,
        "timeout": job.timeout_s,
        "max_cost_usd": job.max_cost_usd,
        "max_tokens": job.max_tokens,
    }


def job_status_body(job: EvalJob, progress: dict[str, int] | None = None) -> dict[str, Any]:
    """GET /api/eval/jobs/{id}: status, timestamps, configuration and progress."""
    return {
        "job_id": job.id,
        "status": job.status,
        "error": job.error,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "completed_at": job.completed_at,
        "config": job_config(job),
        "results": progress if progress is not None else selectors.job_progress(job=job),
    }


def event_body(event: JobEvent) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "message": event.data.get("message", ""),
        "data": event.data,
        "created_at": event.created_at,
    }
