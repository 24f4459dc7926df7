"""An Atropos BaseEnv served by `evalhub-atropos` as a synth task app, run as an ordinary job
through the Celery worker and the interceptor."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from jobs.models import SeedRun
from jobs.worker.environments.loop import PLACEHOLDER_KEY
from tests.environments.conftest import SERVER_KEY, replay_reproduces
from tests.support.jobs import api_job_run as job_run

pytestmark = pytest.mark.worker

# WeatherEnv's items are cities in order; the fake provider always asks for Paris's weather.
CITIES = ["Paris", "Rome", "Paris", "Oslo"]


def test_the_bridge_scores_each_seeds_item_with_the_environments_reward_and_replays_it(
    evalhub, atropos_bridge, fake_upstream
):
    base, headers = evalhub
    seeds = [0, 1, 2, 3, 5]
    body = {
        "task_app_url": atropos_bridge, "seeds": seeds, "max_concurrent": 3, "timeout": 60,
        "policy": {"model": "gpt-4o-mini", "provider": "openai"},
    }  # fmt: skip
    run = job_run(base, headers, body)
    assert run["status"]["status"] == "completed", run["status"]
    assert run["status"]["config"]["task_app_kind"] == "synth"
    rows = {r["seed"]: r for r in run["results"]["results"]}
    for seed in seeds:
        city = CITIES[seed % 4]
        assert rows[seed]["score"] == (1.0 if city == "Paris" else 0.25), (seed, rows[seed])
        # Two calls per trajectory: the tool call, then the answer with the tool's result.
        assert rows[seed]["num_llm_calls"] == 2
        assert rows[seed]["tokens"] == 2 * 1500  # the fake's default usage
        messages = SeedRun.objects.get(job_id=run["job_id"], seed=seed).task_trace["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
        assert city in messages[1]["content"]
        assert messages[2]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert json.loads(messages[3]["content"])["city"] == "Paris"
    # The seed page lists the trajectory's tool call with its result.
    page = Client()
    page.force_login(get_user_model().objects.get(username="envs"))
    html = page.get(f"/jobs/{run['job_id']}/seeds/1/").content.decode()
    assert html.count('class="toolcall toolexec"') == 1 and "get_weather" in html
    assert "temperature" in html
    calls = [r for r in fake_upstream.received if r["path"].endswith("/chat/completions")]
    assert len(calls) == 2 * len(seeds)  # no health-check call was billed
    for call in calls:
        assert call["headers"]["authorization"] == f"Bearer {SERVER_KEY}"
        assert PLACEHOLDER_KEY not in json.dumps(call)
    # Replayed: the bridge's calls, made by the environment's own server manager, answered
    # from the recording; each seed's item scores as it did.
    replay_reproduces(base, headers, run, fake_upstream)
