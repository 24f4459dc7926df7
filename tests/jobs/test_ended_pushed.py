"""Attempts the jobs layer ends are pushed to the web processes (evalhub.revocations) once the
transaction that ends them commits: a job closed (cancelled, failed) and a lost worker's
rollout taken over. The worker's own ends are pushed as its rollouts end
(tests/traces/test_revocation_push.py)."""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from evalhub import revocations
from jobs import services
from jobs.models import SeedRun
from tests.jobs.conftest import attempt_of, claim


@pytest.fixture
def web_socket(transactional_db, settings):
    """A socket where a web process binds its own, on a channel of this test's own; yields
    what it has received (waiting up to half a second for more)."""
    settings.CELERY_TASK_DEFAULT_QUEUE = f"ended-{uuid.uuid4().hex[:8]}"
    settings.CELERY_BROKER_URL = "filesystem://"
    folder = revocations.folder()
    folder.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(folder / "1-test.sock"))
    sock.settimeout(0.5)

    def received() -> list[int]:
        ids: list[int] = []
        while True:
            try:
                ids += revocations.decode(sock.recv(65536))
            except TimeoutError:
                return ids

    yield received
    sock.close()
    (folder / "1-test.sock").unlink()


def _running_attempts(job, n: int) -> list[int]:
    return [attempt_of(seed_run).id for seed_run in claim(job, "w1", limit=n)]


@pytest.mark.parametrize("close", ["cancel", "fail"])
def test_closing_a_job_pushes_its_running_attempts(job, web_socket, close):
    attempts = _running_attempts(job, 3)
    if close == "cancel":
        services.job_cancel(job=job)
    else:
        services.job_fail(job_id=job.id, error="the task app is gone")
    assert sorted(web_socket()) == sorted(attempts)


def test_taking_over_a_lost_workers_rollout_pushes_its_attempt(job, web_socket):
    (attempt,) = _running_attempts(job, 1)
    SeedRun.objects.filter(job=job, lease_owner="w1").update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert claim(job, "w2", limit=1)
    assert web_socket() == [attempt]


def test_nothing_is_pushed_when_the_transaction_rolls_back(job, web_socket):
    _running_attempts(job, 2)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.job_cancel(job=job)
        raise RuntimeError("the job's end was not written")
    assert web_socket() == []
