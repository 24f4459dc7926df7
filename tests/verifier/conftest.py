"""A web process whose interceptor serves the judge too: `openai` is the fake provider (which
answers evalhub's judge, see evalhub/fakeprovider), `claude` the fake Anthropic one
(tests/support/fake_anthropic.py) and `deadjudge` a provider nobody listens at.
`stack.worker()` starts real Celery workers pointed at it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from tests.support.fake_anthropic import FakeAnthropic

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


@pytest.fixture(scope="session")
def fake_claude():
    """The fake Anthropic provider on a loopback port; yields its base URL."""
    with servers.serve_asgi(FakeAnthropic()) as base:
        yield base


@pytest.fixture(scope="module")
def judge_web(django_db_setup, django_db_blocker, celery_queue, fake_upstream_server, fake_claude):
    """The web process of the module's tests; yields its base URL."""
    dead = f"http://127.0.0.1:{servers.free_port()}/v1"
    claude = {"kind": "anthropic", "base_url": fake_claude, "api_key_env": "CLAUDE_KEY"}
    with django_db_blocker.unblock():
        web, base = servers.start_web(
            EVALHUB_CELERY_QUEUE=celery_queue,
            OPENAI_BASE_URL=fake_upstream_server.url,
            OPENAI_API_KEY=PROVIDER_KEY,
            CLAUDE_KEY="sk-ant-judge-stack-secret",
            EVALHUB_PROVIDERS=json.dumps({"deadjudge": {"base_url": dead}, "claude": claude}),
        )
    yield base
    web.stop()


@pytest.fixture
def stack(transactional_db, celery_queue, judge_web, fake_upstream):
    _, key = api_key_create_for_username(username="alice")
    s = Stack(base=judge_web, fake=fake_upstream, queue=celery_queue, key=key)
    try:
        yield s
    finally:
        servers.stop_after_test(s.workers)
