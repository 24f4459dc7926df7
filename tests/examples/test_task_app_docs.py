"""The 30-line task app of docs/task-apps.md, as printed there, runs a job end to end: a real
web process (its interceptor calling the fake provider) and a real worker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import types

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from tests.support.jobs import FAST
from tests.support.servers import ROOT, serve_asgi, wait_until

pytestmark = pytest.mark.worker


def docs_task_app():
    text = (ROOT / "docs" / "task-apps.md").read_text()
    code = re.search(r"```python\n(# minimal_task_app\.py.*?)```", text, flags=re.S).group(1)
    assert len(code.strip().splitlines()) <= 30
    module = types.ModuleType("minimal_task_app")
    exec(compile(code, "docs/task-apps.md", "exec"), module.__dict__)  # noqa: S102
    return module.app


def test_the_minimal_task_app_of_the_docs_runs_a_job(transactional_db, celery_queue, fake_upstream):
    web, base = servers.start_web(
        EVALHUB_CELERY_QUEUE=celery_queue, OPENAI_BASE_URL=fake_upstream.url, OPENAI_API_KEY="sk-x"
    )
    worker = servers.start_worker(queue=celery_queue, EVALHUB_PUBLIC_URL=base, **FAST)
    try:
        _, key = api_key_create_for_username(username="alice")
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        with serve_asgi(docs_task_app()) as task_app_url:
            body = {
                "task_app_url": task_app_url,
                "seeds": [0, 1],
                "policy": {"model": "gpt-4o-mini"},
            }
            job_id = api.post("/api/eval/jobs", json=body).json()["job_id"]
            wait_until(
                lambda: api.get(f"/api/eval/jobs/{job_id}").json()["status"] == "completed",
                timeout=90,
                what="the job to complete",
            )
        rows = api.get(f"/api/eval/jobs/{job_id}/results").json()["results"]
    finally:
        worker.stop()
        web.stop()
    assert [r["status"] for r in rows] == ["succeeded", "succeeded"]
    # The fake provider solves the arithmetic question and says the other back; one call each.
    assert [r["score"] for r in rows] == [1.0, 0.0]
    assert [r["num_llm_calls"] for r in rows] == [1, 1]
    asked = sorted(r["body"]["messages"][0]["content"] for r in fake_upstream.received)
    assert asked == ["What is 7 * 6?", "What is the capital of Peru?"]


def documented_curl() -> str:
    """The create of examples/README.md, as printed there, from the key to the curl's end."""
    text = (ROOT / "examples" / "README.md").read_text()
    block = re.search(r"\nKEY=.*?--data @examples/job\.json\n", text, flags=re.S).group(0)
    return re.sub(r"\s+#[^\n]*", "", block)  # the comments beside the commands


def test_the_documented_curl_run_twice_makes_two_jobs(transactional_db, celery_queue):
    """Each run sends a key of its own: a second run is a second job, not the first job again
    (nor a 422 for a key used with another body)."""
    web, base = servers.start_web(EVALHUB_CELERY_QUEUE=f"{celery_queue}-nobody")
    try:
        _, key = api_key_create_for_username(username="alice")
        script = documented_curl().replace("http://127.0.0.1:8000", base)
        runs = [
            subprocess.run(
                ["bash", "-c", script], cwd=ROOT, env={**os.environ, "EVALHUB_API_KEY": key},
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout
            for _ in range(2)
        ]  # fmt: skip
    finally:
        web.stop()
    jobs = [json.loads(run) for run in runs]
    assert all(job["status"] == "pending" for job in jobs), runs
    assert jobs[0]["job_id"] != jobs[1]["job_id"]
