"""`GET .../results` of big jobs: the whole document streamed by the web process (the same JSON
as before, read a chunk at a time), and pages (`?limit=&cursor=`) that walk every row once.
Also the bulk create of a job of the API's maximum number of seeds."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs import labels, services
from jobs.apikeys import api_key_create_for_username
from jobs.models import EvalJob, RolloutAttempt, SeedRun
from traces.models import LLMCall
from traces.results import result_rows
from traces.results.summary import with_people

JOBS = "/api/eval/jobs"
SEEDS = 2_345  # more than two chunks of rows (result_rows.RESULT_ROWS_CHUNK)


def _finished_job(owner, seeds: int) -> EvalJob:
    """A completed job: even seeds succeeded with one LLM call each, odd seeds failed."""
    spec = services.JobSpec(task_app_url="http://127.0.0.1:9", seeds=list(range(seeds)))
    job = services.job_create(owner=owner, spec=spec)
    now = timezone.now()
    runs = SeedRun.objects.filter(job=job)
    runs.update(status="failed", error="boom", attempts=1, finished_at=now)
    good = runs.filter(seed__in=range(0, seeds, 2))
    good.update(status="succeeded", error=None, score=0.25, latency_ms=10.0,
                metrics={"outcome_objectives": {"reward": 0.25}})  # fmt: skip
    attempts = RolloutAttempt.objects.bulk_create(
        RolloutAttempt(seed_run=sr, number=1, run_id=f"r{sr.seed}", token_hash=f"{sr.id:064x}",
                       status="succeeded", started_at=now)
        for sr in good
    )  # fmt: skip
    LLMCall.objects.bulk_create(
        LLMCall(attempt=a, seq=1, model_requested="gpt-4o-mini", request={}, response={},
                prompt_tokens=10, completion_tokens=5, total_tokens=15, cost_usd=0.001,
                http_status=200, started_at=now)
        for a in attempts
    )  # fmt: skip
    EvalJob.objects.filter(pk=job.pk).update(status="completed", completed_at=now)
    job.refresh_from_db()
    return job


@pytest.fixture
def big_job(transactional_db, web_server):
    api_key, key = api_key_create_for_username(username="scale")
    job = _finished_job(api_key.user, SEEDS)
    http = httpx.Client(base_url=web_server, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    yield job, http
    http.close()


def test_the_streamed_document_is_the_whole_results_document(big_job):
    job, http = big_job
    response = http.get(f"{JOBS}/{job.id}/results")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "content-length" not in response.headers  # streamed, not built in memory
    body = response.json()
    summary, rows = result_rows.job_results(job=job)
    # The summary as the job's figures have it, with what people made of its samples.
    summary = with_people(summary, labels.job_people(job=job))
    assert body["summary"] == httpx.Response(200, json=summary).json()
    assert body["mean_score_scored"] == 0.25 and body["num_successful"] == (SEEDS + 1) // 2
    assert body["mean_score"] == pytest.approx(0.25 * body["num_successful"] / SEEDS)
    assert body["job_id"] == job.id and body["status"] == "completed"
    assert [r["seed"] for r in body["results"]] == list(range(SEEDS))
    assert body["results"][0]["tokens"] == 15 and body["results"][1]["tokens"] == 0
    assert body["results"][1]["error"] == "boom"
    assert body["results"][0]["outcome_objectives"] == {"reward": 0.25}


def test_pages_walk_every_row_once_in_seed_order(big_job):
    job, http = big_job
    whole = http.get(f"{JOBS}/{job.id}/results").json()["results"]
    rows, cursor, pages = [], None, 0
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = http.get(f"{JOBS}/{job.id}/results", params=params).json()
        assert page["job_id"] == job.id and page["status"] == "completed"
        assert "summary" not in page
        rows += page["results"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert rows == whole


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"), ({"limit": "x"}, "limit"),
     ({"limit": 5, "cursor": "nonsense"}, "cursor"), ({"cursor": "1:2:3"}, "cursor")],
)  # fmt: skip
def test_bad_page_parameters_are_400_naming_the_field(client_alice, params, field):
    owner = get_user_model().objects.get(username="alice")
    job = services.job_create(
        owner=owner, spec=services.JobSpec(task_app_url="http://127.0.0.1:9", seeds=[1, 2])
    )
    response = client_alice.get(f"{JOBS}/{job.id}/results", params)
    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_a_job_of_the_maximum_number_of_seeds_is_created_in_one_request(client_alice, settings):
    seeds = list(range(settings.EVALHUB_MAX_SEEDS))
    body = {"task_app_url": "http://127.0.0.1:9", "seeds": seeds,
            "policy": {"model": "gpt-4o-mini"}}  # fmt: skip
    response = client_alice.post(JOBS, body, format="json")
    assert response.status_code == 201, response.content
    job_id = response.json()["job_id"]
    assert SeedRun.objects.filter(job_id=job_id, status="pending").count() == len(seeds)
    assert EvalJob.objects.get(pk=job_id).num_seeds == len(seeds)
    page = client_alice.get(f"{JOBS}/{job_id}/results", {"limit": 3}).json()
    assert [r["seed"] for r in page["results"]] == [0, 1, 2]
