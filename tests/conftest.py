from __future__ import annotations

import hashlib
import uuid

import pytest
from django.conf import settings
from django.test import override_settings
from rest_framework.test import APIClient

from evalhub import heartbeats
from evalhub.celery import app as celery_app
from evalhub.fakeprovider import FakeOpenAI
from jobs.apikeys import api_key_create_for_username
from tests.support import servers

# The modules whose behaviour depends on the database engine: claims and leases under row locks,
# bulk writes, keyset pages, figures and sums computed in SQL, events and streams, migrations,
# the worker loop against the broker. CI runs them again on PostgreSQL and Redis (`-m database`);
# the pages, the environments and the clients are not run twice.
DATABASE_DEPENDENT = {
    "tests/jobs/test_among.py", "tests/jobs/test_api.py", "tests/jobs/test_api_unknown_fields.py",
    "tests/jobs/test_answer_memory.py", "tests/jobs/test_batching.py",
    "tests/jobs/test_bulk.py", "tests/jobs/test_dispatch.py",
    "tests/jobs/test_ended_pushed.py",
    "tests/jobs/test_hostile_answers.py", "tests/jobs/test_leases.py",
    "tests/jobs/test_migrations.py", "tests/jobs/test_nonfinite_scores.py",
    "tests/jobs/test_numbers_api.py", "tests/jobs/test_replay.py",
    "tests/jobs/test_replay_api.py", "tests/jobs/test_runner.py",
    "tests/jobs/test_runner_faults.py", "tests/jobs/test_seed_api.py",
    "tests/jobs/test_selectors.py", "tests/jobs/test_services.py", "tests/jobs/test_sse.py",
    "tests/jobs/test_sse_connections.py",
    "tests/scale/test_results.py", "tests/scale/test_sharing.py",
    "tests/scale/test_web_processes.py",
    "tests/traces/test_export.py", "tests/traces/test_interceptor.py",
    "tests/traces/test_members.py", "tests/traces/test_migrations.py",
    "tests/traces/test_replay_wire.py",
    "tests/traces/test_retention.py", "tests/traces/test_revocation.py",
    "tests/traces/test_revocation_push.py",
    "tests/traces/test_rollout_limits.py", "tests/traces/test_selectors.py",
    "tests/traces/test_services.py", "tests/traces/test_seed_stream.py",
    "tests/traces/test_big_members.py",
    "tests/frontend/test_big_samples.py", "tests/frontend/test_jobs_order.py", "tests/frontend/test_live.py",
    "tests/frontend/test_seed_table.py", "tests/frontend/test_timeline.py",
    "tests/frontend/test_selectors.py", "tests/frontend/test_triage.py",
    "tests/verifier/test_limits.py",
    "tests/test_health.py", "tests/test_worker_liveness.py", "tests/test_timestamps.py",
    "tests/observability/test_metrics.py",
}  # fmt: skip


# The modules that hold the system to a bound in time or memory under load of their own making
# (an ended URL refused within 50 ms, a job started within seconds, Ctrl-C obeyed at once, the
# answer budget of thirty big answers): CI runs them on a machine doing nothing else (`-m
# latency`, .ci/run), after the rest has run in parallel streams.
LATENCY_BOUND = {
    "tests/traces/test_revocation_push.py", "tests/scale/test_sharing.py", "tests/test_runall.py",
    "tests/test_health.py", "tests/jobs/test_web_process_http.py",
    "tests/jobs/test_answer_memory.py", "tests/jobs/test_runner_idle.py",
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        path = item.path.relative_to(root).as_posix()
        if path in DATABASE_DEPENDENT:
            item.add_marker(pytest.mark.database)
        if path in LATENCY_BOUND:
            item.add_marker(pytest.mark.latency)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    """On PostgreSQL, a test database of this data directory's own (`test_<name>_<hash of the
    directory>`, where Django names it `test_<name>`): CI's streams, and a developer's run
    beside them, each have a data directory, and runs sharing one test database dropped it
    under each other. (SQLite's is a file in the data directory already.)"""
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        suffix = hashlib.sha256(str(settings.DATA_DIR).encode()).hexdigest()[:8]
        db.setdefault("TEST", {})["NAME"] = f"test_{db['NAME']}_{suffix}"


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


@pytest.fixture(scope="session", autouse=True)
def celery_queue() -> str:
    """A queue of this test session's own, so stale messages from other runs are never picked up.
    Set before any test sends a message: Celery keeps the queues it declared first, so a job
    made earlier would send to the default queue and `control.purge()` would empty that one."""
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
    servers.stop_after_test(started)
    # The warm shutdown they were spared removes a worker's heartbeat; a killed one's would
    # be counted by /healthz until it expires (HEARTBEAT_TTL_S), in the next tests too.
    with override_settings(CELERY_TASK_DEFAULT_QUEUE=celery_queue):
        for worker in started:
            heartbeats.HeartbeatWriter(worker.node).clear()


@pytest.fixture
def web_server(transactional_db, web_process):
    """The session's evalhub web process (see `web_process`); yields its base URL."""
    return web_process


@pytest.fixture(scope="session")
def fake_upstream_server():
    """The fake OpenAI-compatible provider on a loopback port for the session
    (evalhub/fakeprovider); web processes started once per module point at it."""
    fake = FakeOpenAI()
    with servers.serve_asgi(fake) as base:
        fake.url = f"{base}/v1"
        yield fake


@pytest.fixture
def fake_upstream(fake_upstream_server):
    """The fake provider, having forgotten what earlier tests sent it: `.url` is its OpenAI
    base URL (for OPENAI_BASE_URL), `.received` what reached it during this test."""
    fake_upstream_server.reset()
    return fake_upstream_server
