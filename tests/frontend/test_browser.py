"""The dashboard in a real browser (Chromium through Playwright) against a uvicorn web process.

The job, seed and zip tests run real jobs: posted through the API, run by a Celery worker
against the test task app, whose LLM calls go through the web process's interceptor to the
fake provider. These tests also save the screenshots in docs/screenshots/."""

from __future__ import annotations

import json
import zipfile
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.apikeys import api_key_create_for_username
from jobs.events import EventType, job_event_append
from jobs.models import EvalJob, JobStatus, SeedRun
from tests.frontend import job_rows
from tests.frontend.conftest import PROVIDER_KEY
from tests.support.browser import orm_allowed, screenshot, sign_in
from tests.support.jobs import FAST
from tests.support.servers import serve_asgi
from tests.support.task_app import (
    AGENT_REASONING,
    AGENT_SYSTEM,
    score_of,
    task_app_create,
    weather_of,
)

pytestmark = pytest.mark.browser

# Long enough for a worker to start and a job of a few seeds to run on a slow machine.
JOB_TIMEOUT_MS = 90_000


def job_post(web_server: str, *, task_app_url: str, seeds: list[int], **overrides) -> str:
    """Create a job as clients do: POST /api/eval/jobs with one of alice's API keys."""
    with orm_allowed():
        _, key = api_key_create_for_username(username="alice")
    body = {
        "task_app_url": task_app_url,
        "task_app_api_key": job_rows.TASK_APP_KEY,
        "app_id": "weather",
        "env_name": "weather",
        "seeds": seeds,
        "policy": {"model": "gpt-4o-mini", "provider": "openai", "temperature": 0.0},
        "env_config": {"call_llm": "tools"},
        "max_concurrent": 1,
        "timeout": 60,
        **overrides,
    }
    response = httpx.post(
        f"{web_server}/api/eval/jobs", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 201, response.text
    return response.json()["job_id"]


def worker_start(worker_factory, web_server: str):
    """A real worker whose inference URLs point at the web process the browser uses."""
    return worker_factory(EVALHUB_PUBLIC_URL=web_server, **FAST)


def test_sign_in_create_a_key_shown_once_listed_by_prefix_then_revoked(page, web_server):
    sign_in(page, path="/keys/")
    expect(page).to_have_url(f"{web_server}/keys/")
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create key").click()

    plaintext = page.locator("#new-key").input_value()
    assert plaintext.startswith("ehk_")
    prefix = plaintext.split("_")[1]
    row = page.locator(f"tr[data-prefix='{prefix}']")
    expect(row).to_contain_text(f"{prefix}…")
    expect(row).to_contain_text("laptop")
    expect(row).to_contain_text("never")
    api = httpx.get(f"{web_server}/api/eval/jobs", headers={"Authorization": f"Bearer {plaintext}"})
    assert api.status_code == 200

    page.goto("/keys/")  # shown once: never again
    assert plaintext not in page.content()
    expect(row).to_contain_text("live")
    expect(row).not_to_contain_text("never")  # the API call above was recorded as its last use

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    expect(row).to_contain_text("revoked")
    api = httpx.get(f"{web_server}/api/eval/jobs", headers={"Authorization": f"Bearer {plaintext}"})
    assert api.status_code == 401

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()


def test_jobs_list_shows_every_job_and_filters_by_status(page, dashboard_user):
    with orm_allowed():
        done = job_rows.job_make(owner=dashboard_user, seeds=[0, 1, 2, 3])
        job_rows.job_run_all(job=done, scores={0: 0.25, 1: 0.5, 2: 1.0, 3: 1.0})
        running = job_rows.job_make(owner=dashboard_user, seeds=list(range(10)))
        job_rows.job_start(job=running)
        for seed_run in SeedRun.objects.filter(job=running).order_by("seed")[:4]:
            job_rows.seed_complete(seed_run=seed_run, score=0.5)
        failed = job_rows.job_make(owner=dashboard_user, seeds=[7])
        job_rows.job_finish(job=failed, status=JobStatus.FAILED)
        for minutes, job in enumerate([done, running, failed]):
            EvalJob.objects.filter(pk=job.pk).update(
                created_at=timezone.now() - timedelta(minutes=3 - minutes)
            )

    sign_in(page)
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_have_attribute("data-job-id", failed.id)  # newest first
    running_row = page.locator(f"tr[data-job-id='{running.id}']")
    expect(running_row.locator("[data-progress]")).to_have_attribute("aria-valuenow", "4")
    expect(running_row).to_contain_text("4/10")
    expect(page.locator(f"tr[data-job-id='{done.id}']")).to_contain_text("0.688")
    screenshot(page, "jobs-list")

    # The bars of running jobs move without a reload.
    page.evaluate("window.__sameDocument = true")
    with orm_allowed():
        for seed_run in SeedRun.objects.filter(job=running, status="pending").order_by("seed")[:2]:
            job_rows.seed_complete(seed_run=seed_run, error="task app timed out")
            # As a worker does: the job's event stream tells the page.
            job_event_append(
                job_id=running.id,
                type=EventType.SEED_COMPLETED,
                data={"seed": seed_run.seed, "seed_status": "failed"},
            )
    expect(running_row.locator("[data-progress]")).to_have_attribute("aria-valuenow", "6")
    expect(running_row).to_contain_text("(2 failed)")
    assert page.evaluate("window.__sameDocument") is True

    page.get_by_label("Status").select_option("completed")
    expect(page).to_have_url(f"{page.url.split('?')[0]}?status=completed")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-job-id", done.id)


def test_job_page_progress_bar_reaches_the_end_without_a_reload(page, web_server, worker_factory):
    seeds = [0, 1, 2, 3, 4]
    # Each rollout takes a while and one runs at a time, so the page sees the job move.
    app, state = task_app_create()
    env_config = {"call_llm": "tools", "delay_s": 0.8, "status_always": {"3": 500}}
    with serve_asgi(app) as task_app_url:
        job_id = job_post(web_server, task_app_url=task_app_url, seeds=seeds, env_config=env_config)
        sign_in(page, path=f"/jobs/{job_id}/")
        bar = page.locator("[data-progress]")
        # No worker yet: the job waits in the queue, and the page is open on it.
        expect(page.locator("#job [data-status-badge]")).to_have_text("pending")
        expect(bar).to_have_attribute("aria-valuenow", "0")
        expect(bar).to_have_attribute("aria-valuemax", "5")
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads

        worker_start(worker_factory, web_server)
        expect(bar).to_have_attribute("aria-valuenow", "5", timeout=JOB_TIMEOUT_MS)
        expect(page.locator("#job [data-status-badge]")).to_have_text(
            "completed", timeout=JOB_TIMEOUT_MS
        )
    assert set(state.seeds_called()) == set(seeds)

    expect(bar.locator("[data-done]")).to_have_text("5")
    expect(page.locator("[data-count='failed']")).to_have_text("1")
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    # The results section was re-rendered in place: every seed is in the table, with its score.
    expect(page.locator("table.seeds tbody tr")).to_have_count(5)
    expect(page.locator("table.seeds tr[data-seed='2']")).to_contain_text(f"{score_of(2):.3f}")
    expect(page.locator("svg.chart")).to_have_count(2)
    assert page.evaluate("window.__sameDocument") is True

    page.get_by_label("failures only").check()
    expect(page.locator("table.seeds tbody tr")).to_have_count(1)
    expect(page.locator("table.seeds tbody tr")).to_contain_text("task app answered HTTP 500")
    page.get_by_label("failures only").uncheck()
    expect(page.locator("table.seeds tbody tr")).to_have_count(5)
    screenshot(page, "job-page")


def test_seed_page_shows_the_tool_call_arguments_and_folds_the_reasoning(
    page, web_server, worker_factory, fake_upstream
):
    app, state = task_app_create()
    with serve_asgi(app) as task_app_url:
        worker_start(worker_factory, web_server)
        job_id = job_post(web_server, task_app_url=task_app_url, seeds=[0, 1])
        sign_in(page, path=f"/jobs/{job_id}/")
        expect(page.locator("#job [data-status-badge]")).to_have_text(
            "completed", timeout=JOB_TIMEOUT_MS
        )
    # The calls went through the interceptor to the provider, with the server's key.
    assert len(fake_upstream.received) == 4
    assert {r["headers"]["authorization"] for r in fake_upstream.received} == {
        f"Bearer {PROVIDER_KEY}"
    }
    arguments = json.loads(
        state.llm_answers[0]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    )

    page.locator("table.seeds tr[data-seed='1'] a").click()
    expect(page.get_by_role("heading", name="Seed 1")).to_be_visible()
    tool_call = page.locator(".toolcall")
    expect(tool_call).to_contain_text("get_weather")
    assert json.loads(tool_call.locator("pre.args").inner_text()) == arguments
    expect(page.locator(".msg-tool")).to_contain_text(weather_of(arguments))
    expect(page.locator(".msg-system")).to_contain_text(AGENT_SYSTEM)
    expect(page.locator(".llmcall")).to_have_count(2)
    expect(page.locator(".llmcall").first).to_contain_text("TTFT")
    expect(page.locator(".llmcall").first).to_contain_text("(12 reasoning)")

    reasoning = page.locator("details.reasoning")
    expect(reasoning.locator(".text")).to_be_hidden()
    screenshot(page, "seed-page")
    reasoning.locator("summary").click()
    expect(reasoning.locator(".text")).to_have_text(AGENT_REASONING)


def test_download_the_traces_zip_from_the_job_page(page, web_server, worker_factory, tmp_path):
    app, _ = task_app_create()
    with serve_asgi(app) as task_app_url:
        worker_start(worker_factory, web_server)
        job_id = job_post(web_server, task_app_url=task_app_url, seeds=[4, 5])
        sign_in(page, path=f"/jobs/{job_id}/")
        expect(page.locator("#job [data-status-badge]")).to_have_text(
            "completed", timeout=JOB_TIMEOUT_MS
        )
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Download traces (zip)").click()
    path = tmp_path / "traces.zip"
    download_info.value.save_as(path)
    # What clients rely on (safe relative names, the job's traces, no secrets), not a layout.
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert names and all(not n.startswith("/") and ".." not in n.split("/") for n in names)
        texts = [zf.read(name).decode() for name in names]
    assert any(job_id in text for text in texts)
    assert any("get_weather" in text for text in texts)  # the interceptor's LLM calls are in
    assert not any(job_rows.TASK_APP_KEY in text for text in texts)
    assert not any(PROVIDER_KEY in text for text in texts)
