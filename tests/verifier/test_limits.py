"""Judges' own concurrency and timeout, and cancel, through the real worker."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.models import EvalJob, SeedRun
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create
from tests.verifier.test_judge import job_body, job_run, job_wait
from traces.models import LLMCall

pytestmark = pytest.mark.worker


def most_at_once(calls: list[LLMCall]) -> int:
    """The largest number of the calls in flight at one moment (from their recorded spans)."""
    edges = []
    for call in calls:
        end = call.started_at + timedelta(milliseconds=call.latency_ms)
        edges += [(call.started_at, 1), (end, -1)]
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("concurrency", [1, 2])
def test_judges_hold_their_own_concurrency(stack, concurrency):
    app, _ = task_app_create()
    verifier = {"enabled": True, "reward_source": "verifier", "concurrency": concurrency,
                "rubric": "fake-judge:delay=0.4"}  # fmt: skip
    with serve_asgi(app) as url:
        stack.worker()
        stack.worker()
        job, results = job_run(stack, url, verifier, seeds=[0, 1, 2, 3, 4], max_concurrent=5)
    assert job.status == "completed", job.error
    calls = list(LLMCall.objects.filter(attempt__seed_run__job=job, kind="judge"))
    assert len(calls) == 5
    assert most_at_once(calls) == concurrency
    assert all(r["judge_status"] == "done" for r in results["results"])


def test_a_judge_slower_than_the_timeout_is_a_verifier_error(stack):
    app, _ = task_app_create()
    verifier = {"enabled": True, "reward_source": "fused", "weight_outcome": 1.0, "timeout": 1,
                "rubric": "fake-judge:delay=4"}  # fmt: skip
    with serve_asgi(app) as url:
        stack.worker()
        job, results = job_run(stack, url, verifier, seeds=[6])
    assert job.status == "completed"
    (row,) = results["results"]
    assert row["judge_status"] == "failed" and row["score"] is None
    assert "did not answer within 1s (verifier_config.timeout)" in row["verifier_error"]
    assert row["task_app_score"] == pytest.approx(score_of(6))


def test_cancel_stops_the_judges(stack):
    app, _ = task_app_create()
    verifier = {"enabled": True, "reward_source": "verifier", "concurrency": 1,
                "rubric": "fake-judge:delay=3"}  # fmt: skip
    with serve_asgi(app) as url:
        stack.worker()
        response = stack.post("/api/eval/jobs", job_body(url, verifier, seeds=[0, 1, 2, 3]))
        job_id = response.json()["job_id"]
        wait_until(
            lambda: SeedRun.objects.filter(job_id=job_id, judge_status="running").exists(),
            timeout=60, what="a judge at work",
        )  # fmt: skip
        assert stack.post(f"/api/eval/jobs/{job_id}/cancel", {}).status_code == 200
        job = job_wait(job_id)
        wait_until(
            lambda: not SeedRun.objects.filter(
                job_id=job_id, judge_status__in=["pending", "running"]
            ).exists(),
            timeout=30, what="the judgements to stop",
        )  # fmt: skip
    assert job.status == "cancelled"
    statuses = set(SeedRun.objects.filter(job_id=job_id).values_list("judge_status", flat=True))
    assert "cancelled" in statuses and statuses <= {"cancelled", "done", ""}
    job = EvalJob.objects.get(pk=job_id)
    started_after = LLMCall.objects.filter(
        attempt__seed_run__job_id=job_id, kind="judge", started_at__gt=job.cancel_requested_at
    )
    assert not started_after.exists()
