"""A web process whose interceptor serves the judge too: `openai` is the fake provider (which
answers evalhub's judge, see tests/support/fake_openai.py) and `deadjudge` a provider nobody
listens at. `stack.worker()` starts real Celery workers pointed at it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from tests.support import servers

PROVIDER_KEY = "sk-judge-stack-provider-secret"


@dataclass
class Stack:
    base: str
    fake: object
    queue: str
    key: str
    workers: list = field(default_factory=list)

    def worker(self, **env: str) -> servers.ChildProcess:
        env = {"EVALHUB_ROLLOUT_BACKOFF_S": "0.05", "EVALHUB_ROLLOUT_BACKOFF_MAX_S": "0.2", **env}
        worker = servers.start_worker(queue=self.queue, EVALHUB_PUBLIC_URL=self.base, **env)
        self.workers.append(worker)
        return worker

    def post(self, path: str, body: dict) -> httpx.Response:
        return httpx.post(
            f"{self.base}{path}", json=body, headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
        )  # fmt: skip

    def get(self, path: str) -> httpx.Response:
        return httpx.get(
            f"{self.base}{path}", headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )


@pytest.fixture
def stack(transactional_db, celery_queue, fake_upstream):
    dead = f"http://127.0.0.1:{servers.free_port()}/v1"
    web, base = servers.start_web(
        EVALHUB_CELERY_QUEUE=celery_queue,
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY=PROVIDER_KEY,
        EVALHUB_PROVIDERS=json.dumps({"deadjudge": {"base_url": dead}}),
    )
    _, key = api_key_create_for_username(username="alice")
    s = Stack(base=base, fake=fake_upstream, queue=celery_queue, key=key)
    try:
        yield s
    finally:
        for worker in s.workers:
            worker.stop()
        web.stop()
