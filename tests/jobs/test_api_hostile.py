"""Hostile bodies get a 400 naming the field, never a 500, and nothing is stored. (PostgreSQL
refuses NUL characters and lone surrogates; the suite runs on it in CI.)"""

from __future__ import annotations

import json

import pytest

from jobs.models import EvalJob
from tests.jobs.test_api import JOBS, job_body


def post_raw(client, raw: str):
    return client.post(
        JOBS, data=raw.encode("utf-8", "surrogatepass"), content_type="application/json"
    )


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("field", "raw_value"),
    [
        ("policy", '{"model": "gpt\\u0000x"}'),
        ("env_config", '{"k\\u0000": 1}'),
        ("verifier_config", '{"rubric": ["\\u0000"]}'),
        ("policy", '{"model": "\\ud800"}'),
        ("env_name", '"bad\\u0000name"'),
        ("max_tokens", str(2**70)),
        ("env_config", nested(200)),
    ],
)
def test_hostile_values_are_400_naming_the_field(client_alice, field, raw_value):
    body = json.dumps(job_body(**{field: "PLACEHOLDER"})).replace('"PLACEHOLDER"', raw_value)
    response = post_raw(client_alice, body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["error"] == "invalid_request"
    assert field in data["fields"], data
    assert not EvalJob.objects.exists()


@pytest.mark.parametrize(
    "raw", [nested(100_000), json.dumps(job_body()).replace("{", '{"p":' + nested(10_000) + ",", 1)]
)
def test_a_body_nested_too_deep_to_parse_is_400(client_alice, raw):
    response = post_raw(client_alice, raw)
    assert response.status_code == 400 and "body" in response.json()["fields"]
    assert not EvalJob.objects.exists()


def test_a_job_id_with_a_nul_is_404(client_alice):
    response = client_alice.get(f"{JOBS}/eval-x%00y")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
