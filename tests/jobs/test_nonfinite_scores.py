"""A non-finite score stored by an older version (a fused reward whose weights overflowed gave
NaN) is read as a missing score: every read of the job, and every list holding it, still answers.
PostgreSQL keeps NaN and infinities in a float column (SQLite turns NaN into NULL)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from jobs import stats
from jobs.models import JobFigures, SeedRun
from tests.frontend import job_rows
from traces.results import result_rows, summary

JOBS = "/api/eval/jobs"
BAD = [float("nan"), float("inf"), float("-inf")]


def _job_with(owner, bad: float, *, finished: bool = True):
    job = job_rows.job_make(owner=owner, seeds=[0, 1, 2], verifier_config={"enabled": True})
    job_rows.job_start(job=job)
    for seed_run in SeedRun.objects.filter(job=job).order_by("seed"):
        job_rows.seed_complete(seed_run=seed_run, score=0.5)
    SeedRun.objects.filter(job=job, seed=2).update(
        score=bad, verifier_score=bad, task_app_score=bad, judge_status="done"
    )
    if finished:
        job_rows.job_finish(job=job)
    job.refresh_from_db()
    return job


@pytest.fixture
def alice_web(client_alice) -> Client:
    web = Client()
    web.force_login(get_user_model().objects.get(username="alice"))
    return web


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
def test_every_read_of_a_job_with_a_non_finite_score_answers(client_alice, alice_web, bad):
    alice = get_user_model().objects.get(username="alice")
    job = _job_with(alice, bad)
    other = _job_with(alice, 0.25)
    api = [
        f"{JOBS}/{job.id}",
        f"{JOBS}/{job.id}/results",
        f"{JOBS}/{job.id}/results?limit=10",
        f"{JOBS}/{job.id}/results.csv",
        f"{JOBS}/{job.id}/seeds/2",
        f"/api/eval/compare?base={other.id}&candidate={job.id}",
        f"{JOBS}?limit=10",
    ]
    for path in api:
        response = client_alice.get(path)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code == 200, (path, body[:500])
        assert b"NaN" not in body and b"Infinity" not in body, (path, body[:500])
    status = client_alice.get(f"{JOBS}/{job.id}").json()
    assert status["results"]["mean_reward"] == pytest.approx(1 / 3)  # the bad one counts 0
    seed = client_alice.get(f"{JOBS}/{job.id}/seeds/2").json()
    assert seed["result"]["score"] is None and seed["result"]["reward"] is None
    pages = [
        "/",
        "/jobs/progress.json",
        f"/jobs/{job.id}/",
        f"/jobs/{job.id}/progress.json",
        f"/jobs/{job.id}/seeds/2/",
        f"/jobs/{job.id}/results.csv",
        f"/compare/?base={other.id}&candidate={job.id}",
        f"/compare/seeds/2/?base={other.id}&candidate={job.id}",
    ]
    for path in pages:
        response = alice_web.get(path)
        assert response.status_code == 200, path


def test_the_list_answers_with_a_running_and_a_cancelled_job_holding_nan(client_alice):
    alice = get_user_model().objects.get(username="alice")
    running = _job_with(alice, float("nan"), finished=False)
    assert client_alice.get(f"{JOBS}?limit=5").status_code == 200
    assert client_alice.post(f"{JOBS}/{running.id}/cancel").status_code == 200
    listed = client_alice.get(JOBS)
    assert listed.status_code == 200, listed.content[:300]
    assert [j["job_id"] for j in listed.json()["jobs"]] == [running.id]


def test_kept_figures_holding_nan_are_read_as_missing(client_alice):
    alice = get_user_model().objects.get(username="alice")
    job = _job_with(alice, 0.5)
    job.completed_at = timezone.now() - timedelta(hours=1)  # settled: its kept figures are read
    job.save(update_fields=["completed_at"])
    JobFigures.objects.create(
        job=job, name="summary", value='{"mean_score": NaN, "std_score": Infinity}',
        settled=True, computed_at=timezone.now(),
    )  # fmt: skip
    kept = result_rows.kept_figures(job=job, names=("summary",))
    assert kept["summary"] == {"mean_score": None, "std_score": None}


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
def test_figures_count_a_non_finite_score_as_missing(bad):
    samples = [stats.Sample(0, 0, "succeeded", 1.0), stats.Sample(1, 0, "succeeded", bad)]
    figures = stats.job_figures(samples, repeats=1, threshold=0.5)
    assert figures["mean_score"] == 0.5 and figures["num_scored"] == 1
    assert figures["num_passed"] == 1
    assert all(math.isfinite(s["mean"]) for s in figures["seeds"])
    rows = [
        {"seed": s, "repeat": 0, "status": "succeeded", "score": score, "tokens": 0,
         "judge_tokens": 0, "judge_status": "done", "verifier_score": score,
         "judge_cost_usd": 0.0, "latency_ms": 1.0}
        for s, score in ((0, 1.0), (1, bad), (2, 0.0))
    ]  # fmt: skip
    job = type("Job", (), {"repeats": 1, "pass_threshold": 0.5, "num_seeds": 3})()
    made = summary.summarize(job=job, rows=rows)
    assert made["std_score"] == 0.5 and made["max_score"] == 1.0
    assert made["mean_verifier_score"] == 0.5
