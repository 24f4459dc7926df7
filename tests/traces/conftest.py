from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs.models import EvalJob, RolloutAttempt, SeedRun
from tests.support import servers
from traces.tokens import token_hash, token_new

SERVER_KEY = "sk-server-side-secret"
# An operator's own prices: one priced model and one free on purpose.
MODEL_PRICES = {
    "house-model": {"input_per_mtok": 2.0, "output_per_mtok": 8.0, "cache_read_per_mtok": 0.5},
    "free-model": {"input_per_mtok": 0, "output_per_mtok": 0},
}
MAX_REQUEST_BYTES = 64 * 1024


@pytest.fixture
def interceptor_web(transactional_db, fake_upstream):
    """evalhub's web process with `openai` pointed at the fake upstream; yields its base URL."""
    web, base = servers.start_web(
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY=SERVER_KEY,
        EVALHUB_PROVIDERS=json.dumps(
            {"selfhosted": {"base_url": fake_upstream.url, "api_key_env": "SELFHOSTED_KEY"}}
        ),
        SELFHOSTED_KEY="sk-selfhosted-secret",
        EVALHUB_MODEL_PRICES=json.dumps(MODEL_PRICES),
        # Every call re-reads its token, so a test that ends an attempt sees it at once.
        EVALHUB_INTERCEPTOR_TOKEN_TTL_S="0",
        EVALHUB_INTERCEPTOR_READ_TIMEOUT_S="1.5",
        EVALHUB_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
    )
    yield base
    web.stop()


@dataclass
class Rollout:
    token: str
    attempt: RolloutAttempt
    job: EvalJob


@pytest.fixture
def make_rollout(transactional_db):
    """A factory: a job, a seed run and a running attempt, with the token of its URL."""
    owner, _ = get_user_model().objects.get_or_create(username="alice")

    def make(*, provider: str = "openai", status: str = "running", finished_at=None, **job):
        job_row = EvalJob.objects.create(
            owner=owner,
            task_app_url="http://127.0.0.1:9/",
            policy={"provider": provider, "model": "gpt-4o-mini"},
            num_seeds=1,
            **job,
        )
        seed_run = SeedRun.objects.create(job=job_row, seed=7, status="running")
        token = token_new()
        attempt = RolloutAttempt.objects.create(
            seed_run=seed_run,
            number=1,
            run_id=uuid.uuid4().hex,
            token_hash=token_hash(token),
            status=status,
            started_at=timezone.now(),
            finished_at=finished_at,
        )
        return Rollout(token=token, attempt=attempt, job=job_row)

    return make
