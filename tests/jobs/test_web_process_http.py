"""What a real uvicorn web process does with HTTP that Django's test client never sends: a body
sent chunked, requests while its database cannot be reached, clients that send part of a
request and then wait."""

from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

from jobs.models import EvalJob, SeedRun
from tests.frontend.job_rows import job_finish, job_make, job_start, seed_complete
from tests.support import servers

JOBS = "/api/eval/jobs"


def _finished(owner, scores: dict[int, float | None]) -> EvalJob:
    job = job_make(owner=owner, seeds=list(scores))
    job_start(job=job)
    for seed_run in SeedRun.objects.filter(job=job):
        score = scores[seed_run.seed]
        seed_complete(seed_run=seed_run, score=score, error=None if score is not None else "boom")
    job_finish(job=job)
    return job


def _post_chunked(base: str, path: str, key: str, pieces: list[bytes]) -> tuple[int, dict]:
    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(
            "POST", path, body=iter(pieces), encode_chunked=True,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                     "Transfer-Encoding": "chunked"},
        )  # fmt: skip
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def test_a_chunked_rerun_body_is_read(client_alice, web_server):
    """Without a Content-Length Django read no body at all: a rerun of seed 3 reran every
    failed seed. The body is measured as received, and read."""
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    parent = _finished(alice, {1: None, 3: None, 5: 1.0})
    status, body = _post_chunked(
        web_server, f"{JOBS}/{parent.id}/rerun", client_alice.api_key,
        [b'{"seeds": ', b"[3]}"],
    )  # fmt: skip
    assert status == 201, body
    pending = SeedRun.objects.filter(job_id=body["job_id"], status="pending")
    assert list(pending.values_list("seed", flat=True)) == [3]
    status, body = _post_chunked(web_server, f"{JOBS}/{parent.id}/rerun", client_alice.api_key,
                                 [b"[3]"])  # fmt: skip
    assert status == 400 and "body" in body["fields"], body
    # Measured as received, a chunked body is held to EVALHUB_MAX_REQUEST_BYTES like any other.
    big = [b'{"seeds": "failed", "pad": "', b"x" * (11 * 1024 * 1024), b'"}']
    status, body = _post_chunked(web_server, f"{JOBS}/{parent.id}/rerun", client_alice.api_key, big)
    assert status == 413 and body["error"] == "request_too_large", body


@pytest.fixture(scope="module")
def web_without_database(django_db_blocker):
    nowhere = f"postgres://postgres@127.0.0.1:{servers.free_port()}/nowhere"
    with django_db_blocker.unblock():
        web, base = servers.start_web(DATABASE_URL=nowhere)
    yield base
    web.stop()


@pytest.mark.parametrize(
    ("method", "path", "json_body"),
    [
        ("POST", JOBS, {"task_app_url": "http://127.0.0.1:9", "seeds": [1]}),
        ("GET", JOBS, None),
        ("GET", f"{JOBS}/eval-x/events/stream", None),
        ("POST", f"{JOBS}/eval-x/rerun", {}),
    ],
)
def test_the_api_answers_503_json_while_the_database_is_down(
    web_without_database, method, path, json_body
):
    response = httpx.request(
        method, f"{web_without_database}{path}", json=json_body, timeout=30,
        headers={"Authorization": "Bearer ehk_00000000_0000000000000000"},
    )  # fmt: skip
    assert response.status_code == 503, response.text[:300]
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == "service_unavailable"
    assert response.headers["retry-after"]


def test_a_dashboard_page_answers_503_while_the_database_is_down(web_without_database):
    response = httpx.get(
        f"{web_without_database}/jobs/eval-x/", cookies={"sessionid": "x" * 32}, timeout=30
    )
    assert response.status_code == 503, response.text[:300]


SLOW_CLIENTS = 50


def test_slow_clients_holding_partial_requests_are_closed():
    """50 clients that send part of their headers (or headers and part of a body, or nothing)
    and then wait are each closed within the read deadlines, while others are served."""
    web, base = servers.start_web(EVALHUB_HEADERS_TIMEOUT_S="1", EVALHUB_BODY_TIMEOUT_S="1")
    url = urlparse(base)
    partial = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1",  # the head never ends
        b'POST /api/eval/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"se',
        b"",  # connects, sends nothing
    ]
    try:
        held = []
        for i in range(SLOW_CLIENTS):
            sock = socket.create_connection((url.hostname, url.port), timeout=10)
            sock.sendall(partial[i % len(partial)])
            held.append(sock)
        started = time.monotonic()
        assert httpx.get(f"{base}/healthz", timeout=10).status_code in (200, 503)
        for sock in held:
            try:
                while sock.recv(4096):  # a 408 first, or nothing: then the end
                    pass
            except (ConnectionResetError, TimeoutError) as exc:
                assert isinstance(exc, ConnectionResetError), "still open after 10 s"
            sock.close()
        assert time.monotonic() - started < 8
    finally:
        web.stop()
