"""`task_app_kind` on POST /api/eval/jobs: the kinds, and their settings checked up front."""

from __future__ import annotations

import pytest

JOBS = "/api/eval/jobs"
MODEL = {"model": "gpt-4o-mini"}


def post(client, **fields):
    body = {"task_app_url": "http://127.0.0.1:9/mcp", "seeds": [0], "policy": MODEL, **fields}
    return client.post(JOBS, body, format="json")


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"task_app_kind": "gym"}, "task_app_kind", "not a valid choice"),
        ({"task_app_kind": "mcp_gym", "policy": {}}, "policy", "policy.model"),
        (
            {"task_app_kind": "mcp_gym", "policy": {**MODEL, "extra_body": [1]}},
            "policy",
            "extra_body",
        ),  # fmt: skip
        ({"task_app_kind": "openenv"}, "env_config", "mode must be one of"),
        (
            {"task_app_kind": "openenv", "env_config": {"mode": "rollout_tool"}},
            "env_config",
            "tasks",
        ),  # fmt: skip
        (
            {"task_app_kind": "openenv", "env_config": {"mode": "rollout_tool", "tasks": ["x"]}},
            "env_config",
            "tasks",
        ),  # fmt: skip
        ({"task_app_kind": "mcp_gym", "env_config": {"max_steps": 0}}, "env_config", "max_steps"),
        (
            {"task_app_kind": "mcp_gym", "env_config": {"user_prompt_template": "go"}},
            "env_config",
            "{observation}",
        ),  # fmt: skip
        (
            {"task_app_kind": "mcp_gym", "env_config": {"tool_schemas": {"move": 1}}},
            "env_config",
            "tool_schemas",
        ),  # fmt: skip
        (
            {"task_app_kind": "mcp_gym", "env_config": {"env_context": []}},
            "env_config",
            "env_context",
        ),  # fmt: skip
    ],
)
def test_unknown_kinds_and_missing_settings_are_a_400_naming_the_field(
    client_alice, fields, field, words
):
    response = post(client_alice, **fields)
    assert response.status_code == 400, response.content
    assert words in str(response.json()["fields"][field])


def test_the_kind_is_kept_and_shown_in_the_status(client_alice):
    default = post(client_alice)
    assert default.status_code == 201
    status = client_alice.get(f"{JOBS}/{default.json()['job_id']}").json()
    assert status["config"]["task_app_kind"] == "synth"
    gym = post(client_alice, task_app_kind="mcp_gym", env_config={"max_steps": 5})
    assert gym.status_code == 201, gym.content
    status = client_alice.get(f"{JOBS}/{gym.json()['job_id']}").json()
    assert status["config"]["task_app_kind"] == "mcp_gym"
    results = client_alice.get(f"{JOBS}/{gym.json()['job_id']}/results").json()
    assert results["task_app_kind"] == "mcp_gym"
