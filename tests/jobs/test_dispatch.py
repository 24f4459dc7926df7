"""A job is safe once created: with the broker down, POST answers 201 and the job waits in the
database until Celery beat's redispatch hands it out."""

from __future__ import annotations

import sys

import httpx

from jobs.apikeys import api_key_create_for_username
from jobs.models import EvalJob, SeedRun
from tests.support import servers


def test_a_job_created_while_the_broker_is_down_is_201_and_stored(transactional_db):
    # Nothing listens on port 1: every publish fails. (/healthz says so too, slowly: wait for
    # the schema instead.)
    port = servers.free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "uvicorn", "evalhub.asgi:application", "--port", str(port)]
    env = servers.child_env(CELERY_BROKER_URL="redis://127.0.0.1:1/0", EVALHUB_PUBLIC_URL=base)
    web = servers.ChildProcess("web-brokerless", argv, env)

    def up() -> bool:
        try:
            return httpx.get(f"{base}/api/schema", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        servers.wait_until(up, timeout=60, what="the web server to start")
        _, key = api_key_create_for_username(username="brokerless")
        response = httpx.post(
            f"{base}/api/eval/jobs",
            json={"task_app_url": "http://127.0.0.1:9", "seeds": [1, 2]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert response.status_code == 201, response.text
        job = EvalJob.objects.get(pk=response.json()["job_id"])
        assert job.status == "pending" and SeedRun.objects.filter(job=job).count() == 2
        assert "will be handed out later" in web.log()
    finally:
        web.stop()


def test_retries_with_an_idempotency_key_never_create_a_second_job(client_alice, client_bob):
    body = {"task_app_url": "http://127.0.0.1:9", "seeds": [1, 2], "task_app_api_key": "k-1"}
    first = client_alice.post("/api/eval/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="try-7")
    assert first.status_code == 201, first.content
    again = client_alice.post("/api/eval/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="try-7")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["job_id"] == first.json()["job_id"]
    assert EvalJob.objects.filter(owner__username="alice").count() == 1
    # The same key with another request is refused, naming the header and the job.
    other = client_alice.post(
        "/api/eval/jobs", {**body, "seeds": [3]}, format="json", HTTP_IDEMPOTENCY_KEY="try-7"
    )
    assert other.status_code == 422
    assert other.json()["error"] == "idempotency_key_reused"
    assert first.json()["job_id"] in other.json()["fields"]["Idempotency-Key"][0]
    # Keys are per account; no key always creates; a malformed key is a 400.
    bobs = client_bob.post("/api/eval/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="try-7")
    assert bobs.status_code == 201 and bobs.json()["job_id"] != first.json()["job_id"]
    assert client_alice.post("/api/eval/jobs", body, format="json").status_code == 201
    bad = client_alice.post("/api/eval/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="a b")
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["fields"]
    assert EvalJob.objects.filter(owner__username="alice").count() == 2
