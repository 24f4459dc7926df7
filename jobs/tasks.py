"""Celery tasks: they take ids, load rows, call services."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="jobs.job_run")
def job_run(job_id: str) -> None:
    """Work on the job's pending seed runs (see jobs.runner)."""
