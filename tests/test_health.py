"""GET /healthz: database, broker and consuming workers (by heartbeat), answered quickly."""

from __future__ import annotations

import time

import pytest

from evalhub import heartbeats
from tests.support.servers import wait_until


@pytest.fixture
def heartbeat(monkeypatch):
    monkeypatch.setattr(heartbeats, "_others_seen", None)  # what this process's beats saw
    monkeypatch.setattr(heartbeats, "_own_worker", None)
    writers: list[heartbeats.HeartbeatWriter] = []

    def write(name: str, *, draining: bool = False) -> heartbeats.HeartbeatWriter:
        writer = heartbeats.HeartbeatWriter(name, counts_others=lambda: True)
        writer.draining = draining
        assert writer.beat()
        writers.append(writer)
        return writer

    yield write
    for writer in writers:
        writer.clear()


def test_no_consuming_worker_is_503_and_says_so(db, client):
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"] == "ok"
    assert body["checks"]["workers"].startswith("no worker consumed")
    assert body["workers"] == []


def test_a_503_answers_a_probe_and_is_not_logged_as_a_server_error(db, client, caplog):
    """A starting server is probed until it is ready (`make demo` does): no ERROR line each."""
    with caplog.at_level("WARNING", logger="django.request"):
        assert client.get("/healthz").status_code == 503
    assert [r for r in caplog.records if r.name == "django.request"] == []


def test_a_fresh_heartbeat_counts_as_a_consuming_worker(db, client, heartbeat):
    heartbeat("health-test-worker@host")
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert [w["worker"] for w in body["workers"]] == ["health-test-worker@host"]
    assert body["workers"][0]["seen_s_ago"] < heartbeats.HEARTBEAT_TTL_S


def test_a_stale_heartbeat_does_not_count(db, client, heartbeat, monkeypatch):
    heartbeat("health-test-stale@host")
    later = time.time() + heartbeats.HEARTBEAT_TTL_S + 1
    monkeypatch.setattr(heartbeats.time, "time", lambda: later)
    body = client.get("/healthz").json()
    assert body["workers"] == []


def test_a_broker_that_is_down_is_reported_quickly(db, client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    started = time.monotonic()
    response = client.get("/healthz")
    elapsed = time.monotonic() - started
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["database"] == "ok"
    assert "ConnectionError" in body["checks"]["broker"]
    assert body["checks"]["workers"].startswith("unknown")
    assert elapsed < 1.0


@pytest.mark.worker
def test_a_real_worker_is_counted_while_it_consumes_and_not_once_killed(
    client, worker_factory, celery_queue, settings
):
    # Heartbeats live beside the worker's queue: this session's own.
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_queue
    worker = worker_factory()

    def workers() -> list[dict]:
        # Only this test's worker: an earlier test's killed worker is shown until its
        # heartbeat expires (HEARTBEAT_TTL_S), as this one's is below.
        seen = client.get("/healthz").json()["workers"]
        return [w for w in seen if w["pid"] == worker.proc.pid]

    live = wait_until(workers, timeout=30, what="the worker's first heartbeat")
    assert len(live) == 1 and live[0]["host"]
    worker.kill()
    wait_until(
        lambda: not workers(),
        timeout=heartbeats.HEARTBEAT_TTL_S + 5,
        interval=0.5,
        what="the killed worker's heartbeat to expire",
    )


def test_a_beat_counts_the_other_workers_that_take_messages(heartbeat, monkeypatch):
    """What a runner asks per hand (`jobs.worker.here`), kept by the beats of its process's
    own writer: not by a writer that stands in for another worker."""
    assert heartbeats.HeartbeatWriter("others-stand-in@host").beat()
    assert heartbeats._others_seen is None
    heartbeats.HeartbeatWriter("others-stand-in@host").clear()
    alone = heartbeat("others-alone@host")
    assert heartbeats.others_consuming() == 0
    heartbeat("others-second@host")
    assert heartbeats.others_consuming() == 1  # the second one's beat saw the first
    heartbeat("others-draining@host", draining=True)
    assert heartbeats.others_consuming() == 2  # the draining one's: both others consume
    assert alone.beat()
    assert heartbeats.others_consuming() == 1  # the first one's: a draining worker takes none
    # No beat of this process within two periods: read now (here, as one of the three).
    later = time.monotonic() + 2 * heartbeats.HEARTBEAT_S + 1
    monkeypatch.setattr(heartbeats.time, "monotonic", lambda: later)
    assert heartbeats.others_consuming() == 1


def test_a_heartbeat_long_gone_is_deleted_as_it_is_read(heartbeat, monkeypatch):
    """A worker killed without clearing its heartbeat: shown until HEARTBEAT_TTL_S, then not,
    and its record (Redis: a field of one hash; else a file) deleted by the first read after
    PRUNE_AFTER_S."""
    heartbeat("gone-soon@host")
    assert [w["worker"] for w in heartbeats.live_workers()] == ["gone-soon@host"]
    now = time.time()
    monkeypatch.setattr(heartbeats.time, "time", lambda: now + heartbeats.HEARTBEAT_TTL_S + 1)
    assert heartbeats.live_workers() == []
    assert _kept("gone-soon@host")  # kept a while yet
    monkeypatch.setattr(heartbeats.time, "time", lambda: now + heartbeats.PRUNE_AFTER_S + 1)
    assert heartbeats.live_workers() == []
    assert not _kept("gone-soon@host")


def _kept(worker: str) -> bool:
    """Whether the broker still holds the worker's heartbeat record, however old."""
    if heartbeats.redis_url() is None:
        return (heartbeats._folder() / f"{worker}.json").exists()
    client = heartbeats.redis_client(heartbeats.redis_url())
    try:
        return bool(client.hexists(heartbeats._hash_key(), worker))
    finally:
        client.close()
