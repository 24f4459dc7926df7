"""No provider key leaves the server: with two providers besides `openai`, each with its own
key, a job whose provider echoes its key into answers and errors, and a task app that echoes
everything it is given, not one key appears in any API answer, dashboard page, trace, zip or
log line of the web and worker processes."""

from __future__ import annotations

import io
import json
import zipfile

import httpx
import pytest
from django.contrib.auth import get_user_model
from fastapi import FastAPI, Request
from openai import AsyncOpenAI, OpenAIError

from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from traces.models import LLMCall

OPENAI_KEY = "sk-openai-key-held-by-the-server-0001"
GROQ_KEY = "gsk-groq-key-held-by-the-server-0002"
VLLM_KEY = "vllm-key-held-by-the-server-0003"
TASK_APP_KEY = "task-app-key-held-by-the-job-0004"
PASSWORD = "correct-horse-battery-9"
SECRETS = [OPENAI_KEY, GROQ_KEY, VLLM_KEY, TASK_APP_KEY]
# What the careless task app got back from the model: the provider's echo must reach it masked.
SEEN_BY_TASK_APP: list = []


def echo_app() -> FastAPI:
    """A careless task app: it calls the model and puts everything it saw in its answer."""
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {"ok": True}

    @app.post("/rollout")
    async def rollout(request: Request):
        body = await request.json()
        config = body["policy"]["config"]
        client = AsyncOpenAI(base_url=config["inference_url"], api_key="caller", max_retries=0)
        seen = []
        try:
            answer = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                extra_body={"fake": {"echo_key": True}},
            )  # fmt: skip
            seen.append(answer.model_dump())
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "again"}],
                extra_body={"fake": {"echo_key": True, "error_status": 400}},
            )  # fmt: skip
        except OpenAIError as exc:
            seen.append(str(exc))
        finally:
            await client.close()
        SEEN_BY_TASK_APP.extend(seen)
        headers = dict(request.headers)
        return {
            "metrics": {"outcome_reward": 1.0, "details": {"seen": seen, "headers": headers}},
            "trace": {"request": body, "seen": seen},
        }

    return app


@pytest.fixture
def system(transactional_db, celery_queue, fake_upstream, worker_factory):
    providers = {
        "groq": {"base_url": fake_upstream.url, "api_key_env": "GROQ_API_KEY"},
        "vllm": {"base_url": fake_upstream.url, "api_key_env": "VLLM_API_KEY"},
    }
    env = dict(
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY=OPENAI_KEY,
        GROQ_API_KEY=GROQ_KEY,
        VLLM_API_KEY=VLLM_KEY,
        EVALHUB_PROVIDERS=json.dumps(providers),
        LOG_LEVEL="DEBUG",
    )
    web, base = servers.start_web(EVALHUB_CELERY_QUEUE=celery_queue, **env)
    worker = worker_factory(EVALHUB_PUBLIC_URL=base, **env)
    _, key = api_key_create_for_username(username="eve")
    user = get_user_model().objects.get(username="eve")
    user.set_password(PASSWORD)
    user.save()
    with servers.serve_asgi(echo_app()) as task_app_url:
        yield base, {"Authorization": f"Bearer {key}"}, task_app_url, [web, worker]
    web.stop()


def signed_in(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30, follow_redirects=True)
    page = client.get("/login/")
    csrf = page.text.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
    client.post("/login/", data={"username": "eve", "password": PASSWORD,
                                 "csrfmiddlewaretoken": csrf})  # fmt: skip
    assert client.get("/").status_code == 200 and "Sign in" not in client.get("/").text
    return client


@pytest.mark.worker
def test_no_provider_or_task_app_key_leaves_the_server(system, fake_upstream):
    base, headers, task_app_url, processes = system
    api = httpx.Client(base_url=base, headers=headers, timeout=30)
    job_ids = []
    for provider in ("openai", "groq", "vllm"):
        created = api.post("/api/eval/jobs", json={
            "task_app_url": task_app_url, "seeds": [0, 1], "task_app_api_key": TASK_APP_KEY,
            "policy": {"model": "gpt-4o-mini", "provider": provider},
        })  # fmt: skip
        assert created.status_code == 201, created.text
        job_ids.append(created.json()["job_id"])
    for job_id in job_ids:
        servers.wait_until(
            lambda job_id=job_id: api.get(f"/api/eval/jobs/{job_id}").json()["status"]
            == "completed",
            timeout=120, interval=0.3, what=f"job {job_id} to complete",
        )  # fmt: skip

    # Each provider was called with its own key, and echoed it back.
    used = {r["headers"].get("authorization") for r in fake_upstream.received}
    assert {f"Bearer {k}" for k in (OPENAI_KEY, GROQ_KEY, VLLM_KEY)} <= used

    texts: dict[str, str] = {}
    dashboard = signed_in(base)
    texts["jobs page"] = dashboard.get("/").text
    for job_id in job_ids:
        for path in ("", "/results", "/events", "/seeds/0", "/seeds/1"):
            texts[f"API {job_id}{path}"] = api.get(f"/api/eval/jobs/{job_id}{path}").text
        texts[f"API list {job_id}"] = api.get("/api/eval/jobs").text
        zipped = zipfile.ZipFile(io.BytesIO(api.get(f"/api/eval/jobs/{job_id}/traces").content))
        for name in zipped.namelist():
            texts[f"zip {job_id} {name}"] = zipped.read(name).decode()
        for path in ("/", "/seeds/0/", "/seeds/1/"):
            texts[f"page {job_id}{path}"] = dashboard.get(f"/jobs/{job_id}{path}").text
    for process in processes:
        texts[f"log of {process.name}"] = process.log()
    # What was relayed to the task app, and what the interceptor stored.
    texts["relayed to the task app"] = json.dumps(SEEN_BY_TASK_APP)
    for call in LLMCall.objects.filter(attempt__seed_run__job_id__in=job_ids):
        texts[f"stored call {call.pk}"] = json.dumps([call.response, call.error, call.request])

    # The echoes are there, masked: the test would pass vacuously otherwise.
    seed_page = texts[f"page {job_ids[1]}/seeds/0/"]
    assert "I was called with the key &lt;redacted&gt;" in seed_page
    assert "I was called with the key <redacted>" in texts[f"API {job_ids[2]}/seeds/1"]
    assert "I was called with the key <redacted>" in texts["relayed to the task app"]
    leaks = [(where, s) for where, text in texts.items() for s in SECRETS if s in text]
    assert leaks == []
