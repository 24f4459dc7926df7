"""`openenv` jobs against real OpenEnv servers (MCPEnvironment behind OpenEnv's HTTP server), in
both modes, through the Celery worker and the interceptor."""

from __future__ import annotations

import json

import httpx
import pytest

from jobs.models import SeedRun
from jobs.worker.environments.loop import PLACEHOLDER_KEY
from tests.environments.conftest import SERVER_KEY, replay_reproduces
from tests.support.jobs import api_job_run as job_run

pytestmark = pytest.mark.worker

USAGE = {"prompt_tokens": 80, "completion_tokens": 10}
CALL_COST = (80 * 0.15 + 10 * 0.60) / 1e6
TASKS = [
    {"task_id": "said", "instruction": "hello there", "verify": ["You said", "hello", "nope"]},
    {"task_id": "setup", "instruction": "two turns", "setup": ["first"], "verify": ["two"]},
]


def policy(**fake) -> dict:
    return {"model": "gpt-4o-mini", "provider": "openai", "extra_body": {"fake": {**USAGE, **fake}}}


def target(seed: int) -> int:
    """The counter's target for a seed (tests/support/env_servers/openenv_server.py)."""
    return 3 + seed % 2


def test_agent_mode_sums_the_step_rewards_until_done_and_a_replay_repeats_them(
    evalhub, openenv_servers, fake_upstream
):
    base, headers = evalhub
    body = {
        "task_app_url": openenv_servers["steps"], "task_app_kind": "openenv", "seeds": [0, 1],
        "policy": policy(tool_name="add", tool_arguments={"amount": 1}),
        "env_config": {"mode": "agent", "max_steps": 8}, "max_concurrent": 2, "timeout": 60,
    }  # fmt: skip
    run = job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    rows = {r["seed"]: r for r in run["results"]["results"]}
    for seed in (0, 1):
        assert rows[seed]["score"] == pytest.approx(0.1 * target(seed))
        assert rows[seed]["num_llm_calls"] == target(seed)
        assert rows[seed]["cost_usd"] == pytest.approx(target(seed) * CALL_COST, rel=1e-9)
        trace = SeedRun.objects.get(job_id=run["job_id"], seed=seed).task_trace
        executions = trace["tool_executions"]
        assert [e["result"]["count"] for e in executions] == list(range(1, target(seed) + 1))
        assert [e["done"] for e in executions] == [False] * (target(seed) - 1) + [True]
        assert trace["stop_reason"] == "terminated"
    for call in fake_upstream.received:
        assert call["headers"]["authorization"] == f"Bearer {SERVER_KEY}"
    replay_reproduces(base, headers, run, fake_upstream)


def test_a_server_at_capacity_makes_seeds_wait_not_fail(evalhub, openenv_servers):
    """A server taking one session at a time, three rollouts at once: the others are told
    "Server at capacity"; that is back-pressure, so they wait and are tried again, charged
    nothing, and the job's events say the server takes one at a time."""
    base, headers = evalhub
    seeds = list(range(6))
    body = {
        "task_app_url": openenv_servers["steps-1"], "task_app_kind": "openenv", "seeds": seeds,
        "policy": policy(tool_name="add", tool_arguments={"amount": 1}),
        "env_config": {"mode": "agent", "max_steps": 8}, "max_concurrent": 3, "timeout": 60,
    }  # fmt: skip
    run = job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    rows = {r["seed"]: r for r in run["results"]["results"]}
    assert {s: rows[s]["status"] for s in seeds} == {s: "succeeded" for s in seeds}, rows
    assert {s: rows[s]["score"] for s in seeds} == {
        s: pytest.approx(0.1 * target(s)) for s in seeds
    }
    runs = SeedRun.objects.filter(job_id=run["job_id"])
    from jobs.models import RolloutAttempt

    errs = list(
        RolloutAttempt.objects.filter(seed_run__job_id=run["job_id"]).values_list("status", "error")
    )
    assert all(r.failures == 0 and r.losses == 0 for r in runs), errs
    assert sum(r.attempts for r in runs) > len(seeds)  # some waited for the server
    events = httpx.get(f"{base}/api/eval/jobs/{run['job_id']}/events", headers=headers).json()
    busy = [e for e in events["events"] if e["type"] == "eval.policy.environment.busy"]
    assert len(busy) == 1 and busy[0]["data"]["limit"] == 1
    assert "takes 1 at once" in busy[0]["data"]["message"]


def test_a_tool_that_raises_goes_back_to_the_model(evalhub, openenv_servers):
    base, headers = evalhub
    body = {
        "task_app_url": openenv_servers["steps"], "task_app_kind": "openenv", "seeds": [0],
        "policy": policy(tool_name="fail", tool_arguments={}),
        "env_config": {"mode": "agent", "max_steps": 2}, "timeout": 60,
    }  # fmt: skip
    run = job_run(base, headers, body)
    seed_run = SeedRun.objects.get(job_id=run["job_id"], seed=0)
    assert seed_run.status == "succeeded" and seed_run.score == 0.0
    errors = [e["error"] for e in seed_run.task_trace["tool_executions"]]
    assert len(errors) == 2 and all("the counter jammed" in e for e in errors)
    assert seed_run.metrics["details"]["tool_errors"] == 2


def test_rollout_tool_mode_scores_the_rollout_result_and_a_replay_repeats_it(
    evalhub, openenv_servers, fake_upstream
):
    base, headers = evalhub
    body = {
        "task_app_url": openenv_servers["rollout"], "task_app_kind": "openenv",
        "seeds": [0, 1, 2], "policy": policy(),
        "env_config": {"mode": "rollout_tool", "tasks": TASKS, "tool_args": {"verify": ["x"]}},
        "max_concurrent": 3, "timeout": 60,
    }  # fmt: skip
    run = job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    rows = {r["seed"]: r for r in run["results"]["results"]}
    # The fake answers "You said: <the prompt's words>"; the task of seed s is TASKS[s % 2].
    assert rows[0]["score"] == pytest.approx(2 / 3) and rows[2]["score"] == pytest.approx(2 / 3)
    assert rows[1]["score"] == 1.0
    assert [rows[s]["num_llm_calls"] for s in (0, 1, 2)] == [1, 2, 1]
    # The rollout tool's own calls carry no usage steering: the fake's default usage.
    assert rows[1]["tokens"] == 2 * (1200 + 300)
    assert rows[1]["cost_usd"] == pytest.approx(2 * (1200 * 0.15 + 300 * 0.60) / 1e6, rel=1e-9)
    seed_run = SeedRun.objects.get(job_id=run["job_id"], seed=0)
    details = seed_run.metrics["details"]
    assert details["task_id"] == "said" and details["proxy_turns"] == 1
    assert [c["passed"] for c in details["verify_results"]] == [True, True, False]
    (call,) = seed_run.task_trace["tool_executions"]
    assert call["name"] == "run_rollout" and call["arguments"]["model"] == "gpt-4o-mini"
    assert "ehi_" not in json.dumps(seed_run.task_trace)  # the token stays out of the trace
    assert seed_run.task_trace["result"]["proxy_turns"][0]["logprobs"]
    # The rollout tool called the interceptor with the placeholder key; the provider never saw it.
    for received in fake_upstream.received:
        assert received["headers"]["authorization"] == f"Bearer {SERVER_KEY}"
        assert PLACEHOLDER_KEY not in json.dumps(received)
    # The server's own calls (the rollout tool's) are replayed as the agent loop's are.
    replay_reproduces(base, headers, run, fake_upstream)


def test_a_rollout_tool_that_outlives_the_timeout_fails_the_seed(evalhub, openenv_servers):
    base, headers = evalhub
    body = {
        "task_app_url": openenv_servers["rollout"], "task_app_kind": "openenv", "seeds": [0],
        "policy": policy(),
        "env_config": {"mode": "rollout_tool", "tasks": [{"instruction": "hi", "sleep_s": 60}]},
        "timeout": 2,
    }  # fmt: skip
    run = job_run(base, headers, body, timeout=50)
    row = run["results"]["results"][0]
    assert row["status"] == "failed" and "timed out after 2s" in row["error"]
