"""`mcp_gym` jobs against a real eval-protocol McpGym server, through the Celery worker and the
interceptor, with the fake provider answering tool calls."""

from __future__ import annotations

import io
import json
import zipfile

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from jobs.models import SeedRun
from jobs.worker.environments.loop import PLACEHOLDER_KEY
from tests.environments.conftest import SERVER_KEY, replay_reproduces
from tests.support import servers
from tests.support.jobs import api_job_run as job_run

pytestmark = pytest.mark.worker

USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
# gpt-4o-mini: $0.15 / $0.60 per million input / output tokens.
CALL_COST = (100 * 0.15 + 20 * 0.60) / 1e6


def gym_job(url: str, *, seeds: list[int], tool: str, arguments: dict, **env_config) -> dict:
    fake = {"tool_name": tool, "tool_arguments": arguments, **USAGE, "reasoning": "Step on."}
    return {
        "task_app_url": url,
        "task_app_kind": "mcp_gym",
        "seeds": seeds,
        "policy": {"model": "gpt-4o-mini", "provider": "openai", "extra_body": {"fake": fake}},
        "env_config": {"max_steps": 10, "env_context": {"lake": "small"}, **env_config},
        "max_concurrent": 3,
        "timeout": 60,
    }


def goal(seed: int) -> int:
    """How far the gym server's goal is for a seed (tests/support/env_servers/gym_server.py)."""
    return 2 + seed % 3


def walk_rewards(seed: int) -> list[float]:
    return [0.1] * (goal(seed) - 1) + [0.5]


def test_scores_tokens_and_tool_calls_are_the_environments_and_a_replay_repeats_them(
    evalhub, gym_server, fake_upstream
):
    base, headers = evalhub
    seeds = [1, 2, 4]
    run = job_run(
        base,
        headers,
        gym_job(gym_server, seeds=seeds, tool="move", arguments={"direction": "forward"}),
    )
    assert run["status"]["status"] == "completed", run["status"]
    assert run["status"]["config"]["task_app_kind"] == "mcp_gym"
    rows = {r["seed"]: r for r in run["results"]["results"]}
    for seed in seeds:
        row = rows[seed]
        assert row["error"] is None, row
        # The score is the control plane's total reward, the walk's length the seed's goal.
        assert row["score"] == pytest.approx(sum(walk_rewards(seed)))
        assert row["num_llm_calls"] == goal(seed)
        assert row["tokens"] == goal(seed) * 120
        assert row["cost_usd"] == pytest.approx(goal(seed) * CALL_COST, rel=1e-9)

        seed_run = SeedRun.objects.get(job_id=run["job_id"], seed=seed)
        assert seed_run.metrics["details"]["terminated"] is True
        assert seed_run.metrics["details"]["steps"] == goal(seed)
        trace = seed_run.task_trace
        assert trace["kind"] == "mcp_gym" and trace["stop_reason"] == "terminated"
        # The seed reached the server: the first observation is the seeded walk's.
        assert json.loads(trace["messages"][1]["content"]) == {
            "position": 0, "goal_distance": goal(seed)
        }  # fmt: skip
        executions = trace["tool_executions"]
        assert [e["step"] for e in executions] == list(range(1, goal(seed) + 1))
        assert {e["name"] for e in executions} == {"move"}
        assert [e["reward"] for e in executions] == pytest.approx(walk_rewards(seed))
        assert [e["result"]["position"] for e in executions] == list(range(1, goal(seed) + 1))
        assert [e["done"] for e in executions][-1] is True
        assert all(e["error"] is None and e["duration_ms"] > 0 for e in executions)
        # The conversation: the model's turns (reasoning kept) and the tool results in order.
        roles = [m["role"] for m in trace["messages"]]
        assert roles == ["system", "user"] + ["assistant", "tool"] * goal(seed)
        assert trace["messages"][2]["reasoning_content"] == "Step on."

    # The provider saw the server's key on every call, never the loop's placeholder.
    calls = [r for r in fake_upstream.received if r["path"].endswith("/chat/completions")]
    assert len(calls) == sum(goal(s) for s in seeds)
    for call in calls:
        assert call["headers"]["authorization"] == f"Bearer {SERVER_KEY}"
        assert PLACEHOLDER_KEY not in json.dumps(call)
        assert call["body"]["tools"][0]["function"]["name"] in {"move", "wait", "crash", "shout"}

    zipped = httpx.get(f"{base}/api/eval/jobs/{run['job_id']}/traces", headers=headers, timeout=60)
    archive = zipfile.ZipFile(io.BytesIO(zipped.content))
    assert json.loads(archive.read("manifest.json"))["config"]["task_app_kind"] == "mcp_gym"
    document = json.loads(archive.read("seeds/seed_1.json"))
    assert document["task_app"]["kind"] == "mcp_gym"
    names = [e["name"] for e in document["task_app"]["trace"]["tool_executions"]]
    assert names == ["move"] * goal(1)

    # The seed page shows each tool execution: arguments, result, reward, the terminal step.
    page = Client()
    page.force_login(get_user_model().objects.get(username="envs"))
    job_page = page.get(f"/jobs/{run['job_id']}/").content.decode()
    assert '<dd class="task-app-kind">mcp_gym</dd>' in job_page
    html = page.get(f"/jobs/{run['job_id']}/seeds/1/").content.decode()
    assert html.count('class="toolcall toolexec"') == goal(1)
    assert "reward 0.500" in html and "<b>done</b>" in html and "goal_distance" in html

    # Replayed: the agent loop's calls answered from the recording, the same walks and scores.
    replayed = replay_reproduces(base, headers, run, fake_upstream)
    for seed in seeds:
        trace = SeedRun.objects.get(job_id=replayed["job_id"], seed=seed).task_trace
        assert [e["reward"] for e in trace["tool_executions"]] == pytest.approx(walk_rewards(seed))


def test_tool_errors_text_results_and_endless_walks(evalhub, gym_server):
    base, headers = evalhub
    crashed = job_run(
        base, headers, gym_job(gym_server, seeds=[0], tool="crash", arguments={}, max_steps=2)
    )
    shouted = job_run(
        base,
        headers,
        gym_job(gym_server, seeds=[0], tool="shout", arguments={"text": "hi"}, max_steps=1),
    )
    waited = job_run(
        base, headers, gym_job(gym_server, seeds=[0], tool="wait", arguments={}, max_steps=3)
    )

    # A tool that raises: its error goes back to the model as the tool's result, and counts.
    seed_run = SeedRun.objects.get(job_id=crashed["job_id"], seed=0)
    assert seed_run.status == "succeeded" and seed_run.score == 0.0
    assert seed_run.metrics["details"]["tool_errors"] == 2
    errors = [e["error"] for e in seed_run.task_trace["tool_executions"]]
    assert len(errors) == 2 and all("the ice cracked under you" in e for e in errors)
    assert seed_run.task_trace["messages"][3]["content"].startswith("Error: ")

    # A result that is not JSON is kept as the text it is.
    seed_run = SeedRun.objects.get(job_id=shouted["job_id"], seed=0)
    (execution,) = seed_run.task_trace["tool_executions"]
    assert execution["result"] == "ECHO hi (this is not JSON)" and execution["error"] is None
    assert seed_run.metrics["details"]["stop_reason"] == "max_steps"

    # An environment that never terminates is cut at max_steps model turns.
    row = waited["results"]["results"][0]
    assert waited["status"]["status"] == "completed"
    assert row["num_llm_calls"] == 3 and row["score"] == 0.0
    seed_run = SeedRun.objects.get(job_id=waited["job_id"], seed=0)
    assert (
        seed_run.metrics["details"] | {"terminated": False, "stop_reason": "max_steps"}
        == seed_run.metrics["details"]
    )


def test_an_unreachable_server_or_one_of_another_kind_fails_the_job_at_once(
    evalhub, gym_server, openenv_servers
):
    base, headers = evalhub
    nowhere = f"http://127.0.0.1:{servers.free_port()}/mcp"
    down = job_run(base, headers, gym_job(nowhere, seeds=[0, 1], tool="move", arguments={}))
    assert down["status"]["status"] == "failed"
    assert "unreachable" in down["status"]["error"] and nowhere in down["status"]["error"]
    body = gym_job(nowhere.removesuffix("/mcp"), seeds=[0], tool="add", arguments={}, mode="agent")
    down = job_run(base, headers, {**body, "task_app_kind": "openenv"})
    assert down["status"]["status"] == "failed" and "unreachable" in down["status"]["error"]

    # OpenEnv has an /mcp endpoint too, but it is no MCP-Gym server.
    not_gym = job_run(
        base,
        headers,
        gym_job(f"{openenv_servers['steps']}/mcp", seeds=[0], tool="add", arguments={}),
    )
    assert not_gym["status"]["status"] == "failed"
    assert "is not an MCP" in not_gym["status"]["error"]

    # An MCP-Gym server given as an OpenEnv one.
    body = gym_job(gym_server, seeds=[0], tool="move", arguments={}, mode="agent")
    not_openenv = job_run(base, headers, {**body, "task_app_kind": "openenv"})
    assert not_openenv["status"]["status"] == "failed"
    assert "is not an OpenEnv server" in not_openenv["status"]["error"]
    assert SeedRun.objects.filter(job_id=not_openenv["job_id"], status="succeeded").count() == 0
