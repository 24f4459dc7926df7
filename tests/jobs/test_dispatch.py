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
