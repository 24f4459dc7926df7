"""synth-ai 0.4.4's EvalJob SDK and eval CLI runner, unchanged, finish jobs on evalhub: a real
web process, a real worker, a real task app, the client in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.jobs import FAST
from tests.support.servers import ROOT, free_port, serve_asgi
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.worker

SEEDS = [0, 1, 2, 3]
ENV_CONFIG = {"status_always": {"2": 400}}


def synth(mode, backend, api_key, task_app, tmp_path, seeds=SEEDS, env_config=ENV_CONFIG):
    env = {"EXPERIMENT_QUEUE_DB_PATH": str(tmp_path / "synth-queue.db"), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.synth_client", mode, backend, api_key, task_app,
         json.dumps(seeds), json.dumps(env_config)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sdk_submit_and_poll_until_complete_get_per_seed_scores_and_errors(
    client_alice, worker_factory, web_server, tmp_path
):
    app, state = task_app_create()
    with serve_asgi(app) as task_url:
        worker_factory(**FAST)
        out = synth("sdk", web_server, client_alice.api_key, task_url, tmp_path)
    assert out["status"] == "completed" and out["succeeded"] is True
    rows = {r["seed"]: r for r in out["seed_results"]}
    assert {s: rows[s]["score"] for s in (0, 1, 3)} == {s: score_of(s) for s in (0, 1, 3)}
    assert rows[2]["score"] is None and "HTTP 400" in rows[2]["error"]
    # The failed seed counts 0 in the mean (docs/figures.md).
    assert out["mean_score"] == pytest.approx((score_of(0) + score_of(1) + score_of(3)) / 4)
    assert state.headers[0]["x-api-key"] == "task-key-123"


def test_cli_run_eval_via_backend_returns_per_seed_results(
    client_alice, worker_factory, web_server, tmp_path
):
    app, _ = task_app_create()
    with serve_asgi(app) as task_url:
        worker_factory(**FAST)
        out = synth("cli", web_server, client_alice.api_key, task_url, tmp_path)
    results = out["results"]
    assert [r["seed"] for r in results] == SEEDS
    for r in results:
        if r["seed"] == 2:
            assert r["score"] is None and "HTTP 400" in r["error"]
        else:
            assert r["score"] == score_of(r["seed"]) and r["error"] is None
            assert r["verifier_score"] == pytest.approx(1 - score_of(r["seed"]))
            assert r["latency_ms"] > 0 and r["tokens"] == 0


def test_cli_reports_a_job_whose_task_app_is_unreachable_as_failed(
    client_alice, worker_factory, web_server, tmp_path
):
    worker_factory(**FAST)
    dead = f"http://127.0.0.1:{free_port()}"
    out = synth("cli", web_server, client_alice.api_key, dead, tmp_path)
    assert "failed: task app unreachable" in out["raised"]
