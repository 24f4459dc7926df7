"""The 30-line task app of docs/task-apps.md, as printed there, runs a job end to end: a real
web process (its interceptor calling the fake provider) and a real worker."""

from __future__ import annotations

import re
import types

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from tests.jobs.test_runner import FAST
from tests.support import servers
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
    # The fake provider repeats the question, so neither answer is right; each made one call.
    assert [r["score"] for r in rows] == [0.0, 0.0]
    assert [r["num_llm_calls"] for r in rows] == [1, 1]
    asked = sorted(r["body"]["messages"][0]["content"] for r in fake_upstream.received)
    assert asked == ["What is 7 * 6?", "What is the capital of Peru?"]
