"""The whole system at once: a job posted over HTTP, run by a real Celery worker against a real
task app whose LLM calls (made with the openai SDK) go through the interceptor to the fake
provider. What the results say must equal what the provider reported."""

from __future__ import annotations

import io
import json
import zipfile

import httpx
import pytest
from django.core.files.storage import default_storage
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openai import AsyncOpenAI, OpenAIError

from jobs.apikeys import api_key_create_for_username
from jobs.models import EvalJob
from tests.support import servers
from tests.support.jobs import api_job_run

SERVER_KEY = "sk-provider-key-only-the-server-holds"
TASK_APP_KEY = "task-app-key-4d5e6f"
CALLER_KEY = "sk-whatever-the-task-app-sends"

# OpenAI's published prices, USD per million tokens.
PRICES = {
    "gpt-4o-mini": {"input": 0.15, "cached": 0.075, "output": 0.60},
    "o4-mini": {"input": 1.10, "cached": 0.275, "output": 4.40},
}


def usage_for(seed: int) -> list[tuple[str, dict[str, int]]]:
    """The two calls a rollout makes, with the usage the fake provider is told to report."""
    return [
        ("gpt-4o-mini", {"prompt_tokens": 1000 + 10 * seed, "completion_tokens": 50 + seed,
                         "cached_tokens": 512}),
        ("o4-mini", {"prompt_tokens": 700 + seed, "completion_tokens": 400,
                     "reasoning_tokens": 300 + seed}),
    ]  # fmt: skip


def expected_cost(model: str, u: dict[str, int]) -> float:
    p = PRICES[model]
    cached = u.get("cached_tokens", 0)
    # Reasoning tokens are inside completion_tokens: billed once, at the output price.
    return (
        (u["prompt_tokens"] - cached) * p["input"]
        + cached * p["cached"]
        + u["completion_tokens"] * p["output"]
    ) / 1e6


def agent_app() -> FastAPI:
    """A task app as people write them: the openai SDK pointed at the inference URL."""
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request):
        body = await request.json()
        seed = body["env"]["seed"]
        config = body["policy"]["config"]
        client = AsyncOpenAI(base_url=config["inference_url"], api_key=CALLER_KEY, max_retries=0)
        try:
            for model, usage in usage_for(seed):
                await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": f"seed {seed}: solve it"}],
                    extra_body={"fake": usage},
                )
        except OpenAIError as exc:
            return JSONResponse({"detail": f"LLM call failed: {exc}"}, status_code=400)
        finally:
            await client.close()
        return {"run_id": body["run_id"], "metrics": {"outcome_reward": 1.0 if seed % 2 else 0.5}}

    return app


@pytest.fixture
def system(transactional_db, celery_queue, fake_upstream, worker_factory):
    """Web (API + interceptor) and one worker, with provider `openai` at the fake upstream."""
    web, base = servers.start_web(
        EVALHUB_CELERY_QUEUE=celery_queue,
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY=SERVER_KEY,
        # Budgets are checked against totals re-read on every call, so the test is exact.
        EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S="0",
    )
    worker_factory(EVALHUB_PUBLIC_URL=base)
    _, key = api_key_create_for_username(username="e2e")
    with servers.serve_asgi(agent_app()) as task_app_url:
        yield base, {"Authorization": f"Bearer {key}"}, task_app_url
    web.stop()


def run_job(base: str, headers: dict[str, str], body: dict) -> tuple[str, dict]:
    run = api_job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    return run["job_id"], run["results"]


@pytest.mark.worker
def test_per_seed_tokens_and_cost_equal_what_the_provider_reported(system, fake_upstream):
    base, headers, task_app_url = system
    seeds = [0, 1, 2, 3, 4]
    job_id, results = run_job(
        base,
        headers,
        {"task_app_url": task_app_url, "task_app_api_key": TASK_APP_KEY, "seeds": seeds,
         "policy": {"model": "gpt-4o-mini", "provider": "openai"}, "max_concurrent": 3},
    )  # fmt: skip

    rows = {r["seed"]: r for r in results["results"]}
    for seed in seeds:
        calls = usage_for(seed)
        row = rows[seed]
        assert row["error"] is None, row
        assert row["num_llm_calls"] == 2
        assert row["tokens"] == sum(u["prompt_tokens"] + u["completion_tokens"] for _, u in calls)
        assert row["cost_usd"] == pytest.approx(
            sum(expected_cost(m, u) for m, u in calls), rel=1e-9
        )
    summary = results["summary"]
    assert summary["total_tokens"] == sum(rows[s]["tokens"] for s in seeds)
    assert summary["total_cost_usd"] == pytest.approx(
        sum(expected_cost(m, u) for s in seeds for m, u in usage_for(s)), rel=1e-9
    )
    assert summary["mean_score"] == pytest.approx((0.5 * 3 + 1.0 * 2) / 5)

    # The provider saw the server's key on every call and never the task app's.
    chat_calls = [r for r in fake_upstream.received if r["path"].endswith("/chat/completions")]
    assert len(chat_calls) == 2 * len(seeds)
    for call in chat_calls:
        assert call["headers"].get("authorization") == f"Bearer {SERVER_KEY}"
        assert CALLER_KEY not in str(call["headers"])

    # The worker stored the zip as the job ended; the download reads it from storage.
    stored = servers.wait_until(
        lambda: EvalJob.objects.filter(pk=job_id).values_list("traces_zip_name", flat=True)[0],
        timeout=60, what="the worker to store the job's zip",
    )  # fmt: skip
    assert default_storage.exists(stored)

    # The traces zip has every call of every seed, and none of the secrets.
    zipped = httpx.get(f"{base}/api/eval/jobs/{job_id}/traces", headers=headers, timeout=60)
    archive = zipfile.ZipFile(io.BytesIO(zipped.content))
    everything = b"".join(archive.read(name) for name in archive.namelist())
    for secret in (SERVER_KEY, TASK_APP_KEY, CALLER_KEY, headers["Authorization"]):
        assert secret.encode() not in everything
    for seed in seeds:
        document = json.loads(archive.read(f"seeds/seed_{seed}.json"))
        assert [c["usage"]["total_tokens"] for c in document["llm_calls"]] == [
            u["prompt_tokens"] + u["completion_tokens"] for _, u in usage_for(seed)
        ]


@pytest.mark.worker
def test_a_spent_budget_refuses_calls_and_shows_in_the_results(system, fake_upstream):
    base, headers, task_app_url = system
    first_rollout_tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for _, u in usage_for(0))
    _, results = run_job(
        base,
        headers,
        {"task_app_url": task_app_url, "seeds": [0, 1, 2, 3], "max_concurrent": 1,
         "policy": {"model": "gpt-4o-mini"}, "max_tokens": first_rollout_tokens - 1},
    )  # fmt: skip

    rows = {r["seed"]: r for r in results["results"]}
    assert rows[0]["error"] is None and rows[0]["budget_exceeded"] is False
    for seed in (2, 3):
        assert rows[seed]["status"] == "failed" and rows[seed]["budget_exceeded"] is True
        assert "budget" in rows[seed]["error"]
    assert results["summary"]["budget_exceeded"] is True
    # Refused calls never reach the provider. Spending is counted as calls are recorded, just
    # after each answer, so at most the next rollout's calls can slip past a budget just spent.
    chat_calls = [r for r in fake_upstream.received if r["path"].endswith("/chat/completions")]
    assert 2 <= len(chat_calls) <= 4
