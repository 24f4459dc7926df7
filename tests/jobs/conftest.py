from __future__ import annotations

import secrets

import pytest
from django.contrib.auth import get_user_model

from jobs import claims, services
from jobs.models import EvalJob, RolloutAttempt, SeedRun


@pytest.fixture
def job(db) -> EvalJob:
    """A running job of ten seeds, at most three at a time; no worker works on it."""
    owner = get_user_model().objects.create(username="owner")
    spec = services.JobSpec(
        task_app_url="http://127.0.0.1:9", seeds=list(range(10)), max_concurrent=3
    )
    created = services.job_create(owner=owner, spec=spec)
    return services.job_start(job_id=created.id)


def runner_claim(job, worker="w1", limit=100, lease_s=60.0) -> claims.RolloutClaim:
    """A runner's claim (`claims.rollouts_claim`), with fresh token hashes."""
    hashes = [secrets.token_hex(32) for _ in range(limit)]
    return claims.rollouts_claim(
        job_id=job.id, worker=worker, limit=limit, lease_s=lease_s, token_hashes=hashes
    )


def claim(job, worker="w1", limit=100, lease_s=60.0) -> list[SeedRun]:
    """`runner_claim`'s seed runs, in id order, each with its attempt started (`attempt_of`)."""
    got = runner_claim(job, worker, limit, lease_s)
    return list(SeedRun.objects.filter(pk__in=[c.id for c, _ in got.rollouts]).order_by("id"))


def attempt_of(seed_run: SeedRun) -> RolloutAttempt:
    """The seed run's latest attempt."""
    return RolloutAttempt.objects.filter(seed_run=seed_run).order_by("-number").first()
