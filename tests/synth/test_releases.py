"""synth-ai releases against evalhub, unchanged: task apps built with the task-app frameworks of
0.4.4, 0.5.0 and 0.7.3 (each in a process of its own, with the python of a virtualenv holding
that release), and the eval clients of 0.5.0 and 0.7.3. Everything is real (web process,
Celery worker, interceptor, task apps) but the LLM provider.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from tests.support.jobs import FAST, api_job_create, api_job_wait
from tests.support.servers import ROOT
from tests.support.synth_task_app import reward_of, usage_for

pytestmark = pytest.mark.worker

# Where each release is installed: 0.4.4 in evalhub's own .venv, the others by `make synth-venvs`.
VENVS = {"0.4.4": ".venv", "0.5.0": ".venv-synth/0.5.0", "0.7.3": ".venv-synth/0.7.3"}
TASK_APP_KEY = "env-key-synth-compat-0123456789"
SERVER_KEY = "sk-provider-key-only-the-server-holds"
SEEDS = [0, 1, 2, 3]
# gpt-4o-mini at OpenAI's published prices, USD per million tokens.
INPUT_PRICE, OUTPUT_PRICE = 0.15, 0.60


def python_of(version: str) -> str:
    python = ROOT / VENVS[version] / "bin" / "python"
    if not python.exists():
        pytest.fail(
            f"synth-ai {version} is not installed at {python.parent}: run `make synth-venvs`"
        )
    return str(python)


def synth_env(home: Path) -> dict[str, str]:
    """What a synth-ai process sees: its key, a home of its own, nothing of evalhub's."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "ENVIRONMENT_API_KEY": TASK_APP_KEY,
        "SYNTH_LOCALAPI_AUTH_PERSIST": "0",
        "EXPERIMENT_QUEUE_DB_PATH": str(home / "synth-queue.db"),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture(scope="module")
def task_apps(tmp_path_factory):
    """{version: (base URL, file of the requests it accepted)}, one process per release, shared
    by the module's tests (they start in parallel: 0.4.4's imports take seconds)."""
    started = {}
    for version in VENVS:
        home = tmp_path_factory.mktemp(f"synth-{version}")
        port, requests_path = servers.free_port(), home / "requests.jsonl"
        log = open(home / "task-app.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [python_of(version), "-m", "tests.support.synth_task_app", str(port), str(requests_path)],
            cwd=ROOT, env=synth_env(home), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        started[version] = (proc, log, home, f"http://127.0.0.1:{port}", requests_path)
    try:
        for version, (proc, _, home, url, _) in started.items():

            def up(proc=proc, url=url, home=home, version=version) -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"task app {version} exited:\n{(home / 'task-app.log').read_text()}"
                    )
                try:
                    return httpx.get(
                        f"{url}/health", headers={"X-API-Key": TASK_APP_KEY}
                    ).is_success
                except httpx.HTTPError:
                    return False

            servers.wait_until(up, timeout=60, interval=0.2, what=f"synth-ai {version}'s task app")
        yield {v: (url, path) for v, (_, _, _, url, path) in started.items()}
    finally:
        for proc, log, *_ in started.values():
            proc.terminate()
            proc.wait(timeout=15)
            log.close()


@pytest.fixture
def system(transactional_db, celery_queue, fake_upstream, worker_factory):
    """Web (API + interceptor) and one worker, provider `openai` at the fake upstream."""
    web, base = servers.start_web(
        EVALHUB_CELERY_QUEUE=celery_queue,
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY=SERVER_KEY,
    )
    worker_factory(EVALHUB_PUBLIC_URL=base, **FAST)
    _, key = api_key_create_for_username(username="synth")
    yield base, key
    web.stop()


def expected_cost(seed: int) -> float:
    usage = usage_for(seed)
    return (usage["prompt_tokens"] * INPUT_PRICE + usage["completion_tokens"] * OUTPUT_PRICE) / 1e6


def accepted(requests_path: Path) -> list[dict]:
    return [json.loads(line) for line in requests_path.read_text().splitlines()]


def test_jobs_complete_on_task_apps_of_each_framework_with_exact_scores_tokens_and_cost(
    system, task_apps
):
    base, key = system
    headers = {"Authorization": f"Bearer {key}"}
    jobs = {}
    for version, (url, _) in task_apps.items():
        body = {"task_app_url": url, "task_app_api_key": TASK_APP_KEY, "env_name": "demo",
                "seeds": SEEDS, "policy": {"model": "gpt-4o-mini", "provider": "openai"},
                "max_concurrent": 2, "timeout": 30}  # fmt: skip
        jobs[version] = api_job_create(base, headers, body)

    for version, job_id in jobs.items():
        status = api_job_wait(base, headers, job_id)
        results = httpx.get(f"{base}/api/eval/jobs/{job_id}/results", headers=headers).json()
        rows = {r["seed"]: r for r in results["results"]}
        assert status["status"] == "completed", (version, results)
        assert [rows[s]["error"] for s in SEEDS] == [None] * len(SEEDS), version
        assert {s: rows[s]["score"] for s in SEEDS} == {s: reward_of(s) for s in SEEDS}, version
        for seed in SEEDS:
            usage = usage_for(seed)
            assert rows[seed]["tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
            assert rows[seed]["cost_usd"] == pytest.approx(expected_cost(seed), rel=1e-9)
            assert rows[seed]["verifier_score"] == pytest.approx(1 - reward_of(seed))
        mean = sum(reward_of(s) for s in SEEDS) / len(SEEDS)
        assert results["mean_reward"] == results["summary"]["mean_reward"] == pytest.approx(mean)
        assert status["results"]["mean_reward"] == pytest.approx(mean)

        # What each framework's own RolloutRequest model accepted.
        requests = accepted(task_apps[version][1])
        mine = [r for r in requests if r["policy"]["config"]["inference_url"].startswith(base)]
        assert len(mine) >= len(SEEDS)
        for request in mine:
            assert (
                request["trace_correlation_id"]
                == request["policy"]["config"]["trace_correlation_id"]
            )
            assert request["run_id"]

        seed_page = httpx.get(f"{base}/api/eval/jobs/{job_id}/seeds/1", headers=headers).json()
        answer = seed_page["trace"]["task_app"]
        if version == "0.4.4":  # metrics
            assert rows[1]["outcome_objectives"] is None
            assert answer["metrics"]["reward_mean"] == reward_of(1)
        else:  # reward_info, with the answer's other fields kept
            objectives = {"reward": reward_of(1), "brevity": 0.5}
            assert rows[1]["outcome_objectives"] == objectives
            assert seed_page["trace"]["outcome_objectives"] == objectives
            assert answer["metrics"]["success_status"] == "success"
            assert answer["metrics"]["status_detail"] == "seed 1 done"
            assert answer["metrics"]["artifact"][0]["content_type"] == "text"
            assert answer["trace"]["event_history"][0]["type"] == "lm_call"


def run_client(mode: str, version: str, base: str, key: str, task_app: str, home: Path) -> dict:
    done = subprocess.run(
        [python_of(version), "-m", "tests.support.synth_client", mode, base, key, task_app,
         json.dumps(SEEDS), "{}"],
        cwd=ROOT, env=synth_env(home), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_eval_cli_of_0_5_runs_a_job_with_ops_and_reads_objectives(system, task_apps, tmp_path):
    base, key = system
    out = run_client("cli-0.5", "0.5.0", base, key, task_apps["0.5.0"][0], tmp_path)
    rows = {r["seed"]: r for r in out["results"]}
    assert {s: rows[s]["score"] for s in SEEDS} == {s: reward_of(s) for s in SEEDS}
    assert rows[3]["outcome_objectives"] == {"reward": reward_of(3), "brevity": 0.25}
    assert rows[3]["tokens"] == sum(usage_for(3).values())


def test_eval_job_sdk_of_0_7_streams_polls_cancels_and_reads_results(system, task_apps, tmp_path):
    base, key = system
    out = run_client("sdk-0.7", "0.7.3", base, key, task_apps["0.7.3"][0], tmp_path)
    mean = sum(reward_of(s) for s in SEEDS) / len(SEEDS)
    # stream_until_complete follows /eval/jobs/{id} and its SSE stream (no /api prefix) to the
    # end. It names a job ended by its completed event "succeeded", which its own EvalStatus
    # does not know (pending), and returns only what its last status poll read (every 2 s; a
    # short job may end before the first): clients read the results after it, as here.
    assert out["stream"]["raw_status"] == "succeeded"
    results = out["results"]
    assert results["status"] == "completed" and results["mean_reward"] == pytest.approx(mean)
    rows = {r["seed"]: r for r in results["results"]}
    assert rows[2]["outcome_objectives"] == {
        "reward": reward_of(2),
        "brevity": pytest.approx(1 / 3),
    }
    assert out["workflow_state"]["workflow_state"]["status"] == "completed"
    assert out["trace_files"] == ["manifest.json"] + [f"seed_{s}.json" for s in SEEDS]

    for way in ("sse", "poll"):
        result = out[way]
        assert result["status"] == "completed", way
        assert result["mean_reward"] == pytest.approx(mean), way
        assert result["total_tokens"] == sum(sum(usage_for(s).values()) for s in SEEDS), way
        assert {r["seed"]: r["score"] for r in result["seed_results"]} == {
            s: reward_of(s) for s in SEEDS
        }, way
    types = [e["type"] for e in out["sse_events"]]
    assert types[-1] == "eval.policy.job.completed"
    assert [e["data"]["completed"] for e in out["sse_events"][1:-1]] == [1, 2, 3, 4]

    cancel = out["cancel"]
    assert cancel["status"] == "cancelled" and "no longer needed" in cancel["message"]
    assert cancel["job_id"] and out["cancelled_status"] == "cancelled"
