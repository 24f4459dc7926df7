"""Hostile bodies get a 400 naming the field, never a 500, and nothing is stored. (PostgreSQL
refuses NUL characters and lone surrogates; the suite runs on it in CI.)"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from jobs.models import EvalJob
from jobs.worker.taskapp import task_app_probe
from tests.jobs.test_api import JOBS, job_body
from traces.redaction import job_redactor


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


FUSED = '{"enabled": true, "reward_source": "fused", '


@pytest.mark.parametrize(
    ("field", "raw_value"),
    [
        ("verifier_config", FUSED + '"weight_env": 1e308, "weight_event": 1e308}'),
        ("verifier_config", FUSED + '"weight_outcome": 1e7}'),
        ("verifier_config", FUSED + '"weight_env": 1e999}'),
        ("verifier_config", '{"timeout": 1e999}'),
        ("max_cost_usd", "1e999"),
        ("max_cost_usd", "-1e999"),
        ("max_tokens", "1e999"),
        ("pass_threshold", "1e999"),
        ("pass_threshold", "-1e999"),
        ("max_failures", "1e999"),
        ("timeout", "1e999"),
        ("max_concurrent", "1e999"),
        ("rollout_limits", '{"max_cost_usd": 1e999}'),
        ("rollout_limits", '{"max_tokens": 1e999}'),
        ("policy", '{"temperature": 1e999}'),
    ],
)
def test_numbers_that_are_not_finite_or_overflow_are_400_naming_the_field(
    client_alice, field, raw_value
):
    test_hostile_values_are_400_naming_the_field(client_alice, field, raw_value)


def test_a_job_id_with_a_nul_is_404(client_alice):
    response = client_alice.get(f"{JOBS}/eval-x%00y")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    # the same answer as any route that is not there
    assert response.json() == client_alice.get(f"{JOBS}/eval-x/nowhere").json()


@pytest.mark.parametrize(
    "url",
    ["http://[::1", "http://[::1]:99999", "http://example.com:99999", "http://example.com:0",
     "http://example.com:x", "http://:80", "http://user:pw@", "http://[nope]/"],
)  # fmt: skip
def test_a_task_app_url_python_cannot_read_is_400_naming_it(client_alice, url):
    test_hostile_values_are_400_naming_the_field(client_alice, "task_app_url", json.dumps(url))


@pytest.mark.parametrize(
    "cursor",
    [
        "cD0yMDI2",  # "p=2026": a position that is no time
        base64.b64encode(b"p=2026-13-45 10:00:00").decode(),
        base64.b64encode(b"o=1&p=\x00").decode(),
        base64.b64encode(b"o=1&r=1&p=" + b"9" * 40).decode(),
        "not-base64!",
        base64.b64encode(b"\xff\xfe").decode(),
    ],
)
def test_a_crafted_list_cursor_is_400_naming_it(client_alice, cursor):
    client_alice.post(JOBS, job_body(), format="json")
    response = client_alice.get(JOBS, {"cursor": cursor})
    assert response.status_code == 400, response.content
    assert "cursor" in response.json()["fields"]


def test_a_cursor_from_the_list_still_pages(client_alice):
    ids = [client_alice.post(JOBS, job_body(), format="json").json()["job_id"] for _ in range(3)]
    first = client_alice.get(JOBS, {"limit": 2}).json()
    second = client_alice.get(JOBS, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [j["job_id"] for j in first["jobs"] + second["jobs"]] == ids[::-1]


def test_a_judge_provider_the_interceptor_does_not_know_is_400(client_alice):
    config = '{"enabled": true, "backend_provider": "nosuchprovider"}'
    test_hostile_values_are_400_naming_the_field(client_alice, "verifier_config", config)
    known = job_body(verifier_config={"enabled": True, "backend_provider": "openai"})
    assert client_alice.post(JOBS, known, format="json").status_code == 201


def test_credentials_in_the_task_app_url_are_never_shown(client_alice):
    body = job_body(task_app_url="http://evaluser:hunter2-secret-pw@127.0.0.1:9/app")
    created = client_alice.post(JOBS, body, format="json")
    assert created.status_code == 201, created.content
    job_id = created.json()["job_id"]
    assert EvalJob.objects.get(pk=job_id).task_app_url.startswith("http://evaluser:hunter2")
    for response in (created, client_alice.get(f"{JOBS}/{job_id}"), client_alice.get(JOBS)):
        assert b"hunter2" not in response.content and b"evaluser" not in response.content
    shown = client_alice.get(f"{JOBS}/{job_id}").json()["config"]["task_app_url"]
    assert shown == "http://<redacted>@127.0.0.1:9/app"
    # What a task app echoes, and the messages about it (a seed's error, the job's), too.
    job = EvalJob.objects.get(pk=job_id)
    echoed = job_redactor(job=job).value({"seen": "pw=hunter2-secret-pw", "url": job.task_app_url})
    assert "hunter2" not in json.dumps(echoed)

    async def probe() -> str | None:
        async with httpx.AsyncClient() as client:
            return await task_app_probe(client, base_url=job.task_app_url, api_key=None, tries=1)

    assert "hunter2" not in async_to_sync(probe)() and "evaluser" not in async_to_sync(probe)()
    web = Client()
    web.force_login(job.owner)
    assert b"hunter2" not in web.get(f"/jobs/{job_id}/").content


def test_a_query_in_a_stored_task_app_url_is_never_shown(client_alice):
    # Such URLs are refused now (test_api.py); a job stored before that rule still has one.
    created = client_alice.post(JOBS, job_body(), format="json")
    job_id = created.json()["job_id"]
    EvalJob.objects.filter(pk=job_id).update(
        task_app_url="http://127.0.0.1:9/app?token=query-secret-9#frag-secret-9"
    )
    for response in (client_alice.get(f"{JOBS}/{job_id}"), client_alice.get(JOBS)):
        assert b"query-secret-9" not in response.content, response.content
        assert b"frag-secret-9" not in response.content
    shown = client_alice.get(f"{JOBS}/{job_id}").json()["config"]["task_app_url"]
    assert shown == "http://127.0.0.1:9/app?<redacted>#<redacted>"
    web = Client()
    web.force_login(EvalJob.objects.get(pk=job_id).owner)
    assert b"query-secret-9" not in web.get(f"/jobs/{job_id}/").content
