"""GET /metrics after a real job: the web process (API + interceptor) and a Celery worker count
into their own files (prometheus_client's multiprocess mode); a scrape over HTTP adds them up
and finds the job's LLM calls by model and status, its rollouts, the interceptor's added
latency of each call, the writer's backlog and the queue's depth. Without the token: refused."""

from __future__ import annotations

import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobs.kinds import SYNTH
from tests.support import servers
from tests.support.jobs import api_job_create, api_job_run, api_job_wait, job_body
from tests.support.task_app import task_app_create

TOKEN = "metrics-token-only-prometheus-knows-0f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def scrape(base: str, headers: dict[str, str] | None = AUTH) -> dict[tuple, float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    response = httpx.get(f"{base}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict[tuple, float], name: str, **labels: str) -> float:
    """The sample's value (0 when absent: a counter nobody incremented yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.worker
def test_a_jobs_calls_and_rollouts_are_counted_across_the_web_and_worker_processes(
    evalhub_factory,
):
    base, headers, _ = evalhub_factory(EVALHUB_METRICS_TOKEN=TOKEN)
    model = f"gpt-metrics-{uuid.uuid4().hex[:8]}"  # this test's calls alone carry it
    before = scrape(base)
    app, state = task_app_create()
    with servers.serve_asgi(app) as task_app_url:
        body = job_body(task_app_url, seeds=[0, 1, 2], env_config={"call_llm": "tools"},
                        policy={"model": model, "provider": "openai"})  # fmt: skip
        run = api_job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    calls = 2 * 3  # the tool loop makes two chat completions per rollout
    assert len(state.llm_answers) == calls

    # The interceptor counts a call as it hands its record to the writer, after answering it.
    def counted():
        after = scrape(base)
        n = value(
            after,
            "evalhub_llm_calls_total",
            provider="openai",
            model=model,
            status="200",
            answered_by="provider",
        )
        return after if n >= calls else None

    after = servers.wait_until(counted, timeout=10, what="the job's calls to be counted")
    assert value(after, "evalhub_llm_calls_total", provider="openai", model=model,
                 status="200", answered_by="provider") == calls  # fmt: skip
    assert not [k for k in after if k[0] == "evalhub_llm_calls_total" and ("model", model) in
                k[1] and ("status", "200") not in k[1]]  # fmt: skip

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # Counted by the worker process, read through the web process.
    assert delta("evalhub_rollouts_started_total", kind=SYNTH) == 3
    assert value(after, "evalhub_rollouts_in_flight", kind=SYNTH) == 0
    # One observation of the interceptor's added latency per call it relayed.
    assert delta("evalhub_interceptor_added_seconds_count") == calls
    added = delta("evalhub_interceptor_added_seconds_sum")
    assert 0 < added < calls * 1.0  # seconds: the interceptor's own work, not the provider's
    assert value(after, "evalhub_interceptor_writer_backlog", queue="completions") == 0
    assert value(after, "evalhub_interceptor_writer_backlog", queue="ahead") == 0
    assert value(after, "evalhub_queue_waiting") >= 0
    assert ("evalhub_queue_waiting", ()) in after

    # Its replay's calls are answered by the recording, counted apart from the provider's.
    with servers.serve_asgi(app) as task_app_url:
        replay = httpx.post(f"{base}/api/eval/jobs/{run['job_id']}/replay", headers=headers,
                            json={"task_app_url": task_app_url}, timeout=30)  # fmt: skip
        assert replay.status_code == 201, replay.text
        ended = api_job_wait(base, headers, replay.json()["job_id"])
    assert ended["status"] == "completed", ended

    def replayed():
        now = scrape(base)
        labels = {"provider": "openai", "model": model, "status": "200"}
        n = value(now, "evalhub_llm_calls_total", **labels, answered_by="recording")
        return now if n >= calls else None

    now = servers.wait_until(replayed, timeout=10, what="the replay's calls to be counted")
    assert value(now, "evalhub_llm_calls_total", provider="openai", model=model, status="200",
                 answered_by="provider") == calls  # fmt: skip


def test_metrics_refuse_a_scrape_without_the_token(evalhub_factory):
    base, headers, _ = evalhub_factory(EVALHUB_METRICS_TOKEN=TOKEN)
    for wrong in ({}, headers, {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": TOKEN}):
        refused = httpx.get(f"{base}/metrics", headers=wrong, timeout=10)
        assert refused.status_code == 401, wrong
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "evalhub_" not in refused.text
    assert scrape(base)  # the token itself is let in


@pytest.mark.worker
def test_a_killed_workers_rollouts_in_flight_leave_the_gauge(evalhub_factory):
    base, headers, worker = evalhub_factory(EVALHUB_METRICS_TOKEN=TOKEN)
    app, _ = task_app_create()
    with servers.serve_asgi(app) as task_app_url:
        body = job_body(task_app_url, seeds=[0, 1], env_config={"hang": [0, 1]}, timeout=300)
        api_job_create(base, headers, body)

        def in_flight() -> float:
            return value(scrape(base), "evalhub_rollouts_in_flight", kind=SYNTH)

        servers.wait_until(lambda: in_flight() == 2, timeout=30, what="two rollouts in flight")
        worker.kill()  # SIGKILL: its files stay behind, its gauge values with them
        assert in_flight() == 0  # the scrape found its pid gone and dropped them
