from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from evalhub.celery import app as celery_app
from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
def make_client(db):
    """A factory: an API client authenticated with a fresh key of user `username`."""

    def make(username: str = "alice") -> APIClient:
        _, plaintext = api_key_create_for_username(username=username)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
        client.api_key = plaintext
        return client

    return make


@pytest.fixture
def client_alice(make_client) -> APIClient:
    return make_client("alice")


@pytest.fixture
def client_bob(make_client) -> APIClient:
    return make_client("bob")


@pytest.fixture(scope="session")
def celery_queue() -> str:
    """A queue of this test session's own, so stale messages from other runs are never picked up."""
    queue = f"evalhub-test-{uuid.uuid4().hex[:8]}"
    celery_app.conf.task_default_queue = queue
    return queue


@pytest.fixture(scope="session")
def web_process(django_db_setup, django_db_blocker, celery_queue):
    """One evalhub web process (uvicorn, the ASGI app with its interceptor) for the session,
    against the test database; yields its base URL. Jobs it creates go to this session's
    queue. Workers point their inference URLs here, so rollouts meet a real interceptor."""
    with django_db_blocker.unblock():
        web, base = servers.start_web(EVALHUB_CELERY_QUEUE=celery_queue)
    yield base
    web.stop()


@pytest.fixture
def worker_factory(transactional_db, celery_queue, web_process):
    """Start real Celery worker processes against the test database; stopped after the test."""
    started: list[servers.ChildProcess] = []

    def start(**kwargs) -> servers.ChildProcess:
        kwargs.setdefault("EVALHUB_PUBLIC_URL", web_process)
        worker = servers.start_worker(queue=celery_queue, **kwargs)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def web_server(transactional_db, web_process):
    """The session's evalhub web process (see `web_process`); yields its base URL."""
    return web_process


@pytest.fixture
def fake_upstream():
    """The fake OpenAI-compatible provider on a loopback port (tests/support/fake_openai.py);
    `.url` is its OpenAI base URL (for OPENAI_BASE_URL), `.received` what reached it."""
    fake = FakeOpenAI()
    with servers.serve_asgi(fake) as base:
        fake.url = f"{base}/v1"
        yield fake
