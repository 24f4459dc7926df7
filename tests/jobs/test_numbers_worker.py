"""Repeats, max_failures, rerun and compare through real Celery workers and a real task app;
synth-ai 0.4.4's SDK and eval CLI runner reading jobs that ran each seed more than once."""

from __future__ import annotations

import io
import json
import zipfile

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from jobs.models import SeedRun
from tests.jobs.test_synth_clients import synth
from tests.support.jobs import FAST, job_create, job_wait
from tests.support.servers import serve_asgi
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.worker

JOBS = "/api/eval/jobs"
# Seed 0 passes on its 1st and 3rd samples, seed 1 never: pass@k by hand below.
REPEAT_SCORES = {"0": [1.0, 0.0, 1.0], "1": [0.0]}


def results_of(client, job_id: str) -> dict:
    response = client.get(f"{JOBS}/{job_id}/results")
    assert response.status_code == 200, response.content
    return response.json()


def test_repeats_run_every_seed_as_samples_of_their_own_with_pass_at_k(
    client_alice, worker_factory, web_server, tmp_path
):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=[0, 1], repeats=3, max_concurrent=2,
            env_config={"scores": REPEAT_SCORES},
        )  # fmt: skip
        assert job_wait(job_id).status == "completed"
        read = synth("sdk-read", web_server, client_alice.api_key, job_id, tmp_path)
    assert state.seeds_called() == {0: 3, 1: 3}
    assert len({r["run_id"] for r in state.requests}) == 6
    body = results_of(client_alice, job_id)
    rows = body["results"]
    assert [(r["seed"], r["repeat"]) for r in rows] == [(s, k) for s in (0, 1) for k in range(3)]
    assert sorted(r["score"] for r in rows if r["seed"] == 0) == [0.0, 1.0, 1.0]
    summary = body["summary"]
    assert summary["num_samples"] == 6 and summary["repeats"] == 3
    assert summary["mean_score"] == pytest.approx(2 / 6) and summary["pass_threshold"] == 1.0
    # Seed 0: n=3, c=2; seed 1: n=3, c=0.
    assert summary["pass_at_k"] == {"1": pytest.approx(1 / 3), "2": 0.5, "3": 0.5}
    assert summary["pass_hat_k"] == {"1": pytest.approx(1 / 3), "2": pytest.approx(1 / 6), "3": 0}
    assert body["seeds"][0] == {"seed": 0, "samples": 3, "mean": pytest.approx(2 / 3),
                                "std": pytest.approx(0.4714045), "passes": 2}  # fmt: skip
    status = client_alice.get(f"{JOBS}/{job_id}").json()
    assert (status["results"]["completed"], status["results"]["total"]) == (6, 6)
    one = client_alice.get(f"{JOBS}/{job_id}/seeds/0?repeat=2").json()
    assert (one["seed"], one["repeat"], one["trace"]["repeat"]) == (0, 2, 2)

    archive = zipfile.ZipFile(io.BytesIO(b"".join(client_alice.get(f"{JOBS}/{job_id}/traces"))))
    assert sorted(archive.namelist()) == ["manifest.json"] + [
        f"seeds/seed_{s}_r{k}.json" for s in (0, 1) for k in range(3)
    ]

    # synth-ai 0.4.4's SDK follows the job to its end and reads a row per sample.
    assert read["status"] == "completed" and read["succeeded"] is True
    assert read["results"]["summary"]["pass_at_k"] == summary["pass_at_k"]
    assert read["mean_score"] == pytest.approx(2 / 6)
    assert [(r["seed"], r["repeat"]) for r in read["seed_results"]] == [
        (r["seed"], r["repeat"]) for r in rows
    ]


def repeats_proxy(backend: str, repeats: int) -> FastAPI:
    """In front of evalhub: adds `repeats` to every job created through it, as a newer client
    asking for repeats would; everything else passes unchanged."""
    proxy = FastAPI()

    @proxy.api_route("/{path:path}", methods=["GET", "POST"])
    async def forward(path: str, request: Request) -> Response:
        body = await request.body()
        if request.method == "POST" and path.rstrip("/") == "api/eval/jobs":
            body = json.dumps({**json.loads(body), "repeats": repeats}).encode()
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("authorization", "content-type")
        }
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.request(
                request.method, f"{backend}/{path}", params=request.query_params,
                content=body, headers=headers,
            )  # fmt: skip
        return Response(answer.content, answer.status_code, media_type="application/json")

    return proxy


def test_synth_eval_cli_runner_reads_a_row_per_sample_of_a_job_with_repeats(
    client_alice, worker_factory, web_server, tmp_path
):
    app, _ = task_app_create()
    with serve_asgi(app) as url, serve_asgi(repeats_proxy(web_server, 2)) as proxy:
        worker_factory(**FAST)
        out = synth("cli", proxy, client_alice.api_key, url, tmp_path, seeds=[0, 1, 2],
                    env_config={"status_always": {"2": 400}})  # fmt: skip
    results = out["results"]
    assert [r["seed"] for r in results] == [0, 0, 1, 1, 2, 2]
    for r in results:
        if r["seed"] == 2:
            assert r["score"] is None and "HTTP 400" in r["error"]
        else:
            assert r["score"] == score_of(r["seed"]) and r["error"] is None


def test_max_failures_stops_the_job_and_sends_no_further_rollout(client_alice, worker_factory):
    app, state = task_app_create()
    seeds = list(range(10))
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=seeds, max_concurrent=1, max_failures=2,
            env_config={"garbage": {str(s): "not_json" for s in seeds}},
        )  # fmt: skip
        job = job_wait(job_id)
        sent = [r["env"]["seed"] for r in state.requests]
    assert job.status == "failed"
    assert job.error.startswith("3 of 10 samples failed, more than max_failures (2)")
    assert "most common error (3x)" in job.error
    # The task app's own log: the three that failed, and nothing after them.
    assert len(sent) == 3
    runs = SeedRun.objects.filter(job_id=job_id)
    assert sorted(runs.filter(status="failed").values_list("seed", flat=True)) == sorted(sent)
    assert runs.filter(status="cancelled").count() == 7
    assert all(r.attempts == 0 for r in runs.filter(status="cancelled"))


def test_rerun_of_failed_seeds_reuses_the_successes_and_runs_only_the_failures(
    client_alice, worker_factory
):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        parent_id = job_create(
            client_alice, url, seeds=[0, 1, 2, 3], name="nightly", tags=["math"],
            env_config={"status_first": {"1": 1, "3": 1}},
        )  # fmt: skip
        assert job_wait(parent_id).status == "completed"
        parent_rows = results_of(client_alice, parent_id)["results"]
        assert [r["status"] for r in parent_rows] == ["succeeded", "failed", "succeeded", "failed"]
        before = len(state.requests)
        answer = client_alice.post(f"{JOBS}/{parent_id}/rerun", {"seeds": "failed"}, format="json")
        assert answer.status_code == 201, answer.content
        child_id = answer.json()["job_id"]
        assert job_wait(child_id).status == "completed"
        rerun_seeds = sorted(r["env"]["seed"] for r in state.requests[before:])
    assert rerun_seeds == [1, 3]
    child = client_alice.get(f"{JOBS}/{child_id}").json()
    assert child["parent_job_id"] == parent_id and child["name"] == "nightly (rerun)"
    assert child["tags"] == ["math"]
    rows = results_of(client_alice, child_id)["results"]
    assert [(r["seed"], r["status"], r["reused"]) for r in rows] == [
        (0, "succeeded", True), (1, "succeeded", False), (2, "succeeded", True),
        (3, "succeeded", False),
    ]  # fmt: skip
    assert [r["score"] for r in rows] == [score_of(s) for s in range(4)]
    summary = results_of(client_alice, child_id)["summary"]
    assert summary["num_successful"] == 4 and summary["num_failed"] == 0


def test_compare_two_real_jobs_with_known_per_seed_scores(client_alice, worker_factory):
    base_scores = {"0": 1.0, "1": 1.0, "2": 0.0, "3": 0.5}
    candidate_scores = {"0": 1.0, "1": 0.0, "2": 1.0, "3": 0.75}
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        base = job_create(client_alice, url, seeds=[0, 1, 2, 3], env_config={"scores": base_scores})
        candidate = job_create(
            client_alice, url, seeds=[0, 1, 2, 3, 4], env_config={"scores": candidate_scores},
            policy={"model": "gpt-4.1-mini"},
        )  # fmt: skip
        job_wait(base), job_wait(candidate)
    answer = client_alice.get(f"/api/eval/compare?base={base}&candidate={candidate}")
    assert answer.status_code == 200, answer.content
    out = answer.json()
    assert [(s["seed"], s["kind"], s["delta"]) for s in out["seeds"]] == [
        (1, "regression", -1.0), (2, "improvement", 1.0), (0, "", 0.0), (3, "", 0.25)
    ]  # fmt: skip
    assert (out["wins"], out["losses"], out["ties"]) == (2, 1, 1)
    assert out["regressions"] == [1] and out["improvements"] == [2]
    assert out["only_in_candidate"] == [4] and out["only_in_base"] == []
    assert out["mean_difference"] == pytest.approx(0.0625)
    assert out["p_value"] == 1.0 and "sign-flip" in out["test"]
    low, high = out["mean_difference_ci95"]
    assert low <= 0.0625 <= high
    assert out["base"]["mean_score"] == pytest.approx(0.625)
    assert out["candidate"]["model"] == "gpt-4.1-mini"
    assert out["candidate"]["mean_score"] == pytest.approx((2.75 + score_of(4)) / 5)
    for side in ("base", "candidate"):
        assert {"total_cost_usd", "total_tokens", "latency_p50_ms"} <= set(out[side])
