"""Making a job and waiting for it to end, the one way every test does it: through the ORM
(`job_create`, `job_wait`) in the test process, or over HTTP (`api_job_create`, `api_job_wait`,
`api_job_run`) against a web process of ours; and the Celery messages this process sends
(`tasks_published`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
from celery.signals import before_task_publish
from django.utils import timezone

from jobs.attempts import AttemptEnd
from jobs.models import EvalJob, SeedRun
from tests.support.servers import wait_until

JOBS = "/api/eval/jobs"
ENDED = ("completed", "failed", "cancelled")
# Retries in a test's worker come quickly.
FAST = {"EVALHUB_ROLLOUT_BACKOFF_S": "0.05", "EVALHUB_ROLLOUT_BACKOFF_MAX_S": "0.2"}


def job_body(task_app_url: str, **overrides: Any) -> dict[str, Any]:
    """A job body on the test task app (tests/support/task_app.py), three seeds by default."""
    body = {
        "task_app_url": task_app_url,
        "task_app_api_key": "task-key-123",
        "env_name": "demo",
        "seeds": [0, 1, 2],
        "policy": {"model": "gpt-4o-mini", "provider": "openai"},
        "env_config": {},
        "max_concurrent": 2,
        "timeout": 30,
    }
    body.update(overrides)
    return body


def job_create(client, task_app_url: str, **overrides: Any) -> str:
    """POST a job with a DRF test client; its id."""
    response = client.post(JOBS, job_body(task_app_url, **overrides), format="json")
    assert response.status_code == 201, response.content
    return response.json()["job_id"]


def job_wait(job_id: str, *, timeout: float = 60.0) -> EvalJob:
    """The job's row once it has ended."""

    def over():
        job = EvalJob.objects.get(pk=job_id)
        return job if job.is_terminal else None

    return wait_until(over, timeout=timeout, what=f"job {job_id} to end")


def seeds_of(job_id: str) -> dict[int, SeedRun]:
    return {sr.seed: sr for sr in SeedRun.objects.filter(job_id=job_id)}


def api_job_create(base: str, headers: dict[str, str], body: dict[str, Any]) -> str:
    created = httpx.post(f"{base}{JOBS}", json=body, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    return created.json()["job_id"]


def api_job_wait(
    base: str, headers: dict[str, str], job_id: str, *, timeout: float = 120
) -> dict[str, Any]:
    """The job's status, as `GET /api/eval/jobs/{id}` answers it, once it has ended."""

    def ended():
        status = httpx.get(f"{base}{JOBS}/{job_id}", headers=headers, timeout=30).json()
        return status if status["status"] in ENDED else None

    return wait_until(ended, timeout=timeout, interval=0.3, what=f"job {job_id} to end")


def api_job_run(
    base: str, headers: dict[str, str], body: dict[str, Any], *, timeout: float = 120
) -> dict[str, Any]:
    """POST the job, wait for it to end: its id, status and results."""
    job_id = api_job_create(base, headers, body)
    status = api_job_wait(base, headers, job_id, timeout=timeout)
    results = httpx.get(f"{base}{JOBS}/{job_id}/results", headers=headers, timeout=30)
    return {"job_id": job_id, "status": status, "results": results.json()}


@contextlib.contextmanager
def tasks_published() -> Iterator[list[str]]:
    """The names of the Celery tasks this process publishes inside the block, in order, as
    Celery's `before_task_publish` signal sees them (the message goes to the broker as ever)."""
    sent: list[str] = []

    def published(sender=None, **_) -> None:
        sent.append(sender)

    before_task_publish.connect(published)
    try:
        yield sent
    finally:
        before_task_publish.disconnect(published)


def attempt_end(attempt_id: int, status: str = "succeeded") -> AttemptEnd:
    """How the attempt ended, its POST made just now (`jobs.attempts.rollout_attempt_finish`)."""
    return AttemptEnd(attempt_id=attempt_id, posted_at=timezone.now(), status=status)
