"""The eval-job API of the contract: auth, ownership, validation, secrets, pagination."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from jobs.apikeys import api_key_revoke
from jobs.models import ApiKey, EvalJob, SeedRun

JOBS = "/api/eval/jobs"
SECRET = "task-app-secret-value-9f8e7d"


def job_body(**overrides):
    body = {
        "task_app_url": "http://127.0.0.1:9/",
        "task_app_api_key": SECRET,
        "app_id": "math",
        "env_name": "math",
        "seeds": [0, 1, 2],
        "policy": {"model": "gpt-4o-mini", "provider": "openai", "temperature": 0.0},
        "env_config": {"split": "test"},
        "mode": "eval",
        "max_concurrent": 2,
        "timeout": 30,
        "verifier_config": {"kind": "exact"},
    }
    body.update(overrides)
    return body


def create(client, **overrides):
    return client.post(JOBS, job_body(**overrides), format="json")


def test_create_returns_job_id_and_pending_status_and_one_seed_run_per_seed(client_alice):
    response = create(client_alice, seeds=[5, 3, 9])
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "pending"
    assert body["job_id"].startswith("eval-") and len(body["job_id"]) > 30
    job = EvalJob.objects.get(pk=body["job_id"])
    assert sorted(SeedRun.objects.filter(job=job).values_list("seed", flat=True)) == [3, 5, 9]
    assert job.verifier_config == {"kind": "exact"}
    assert body["results"] == {
        "completed": 0, "total": 3, "succeeded": 0, "failed": 0,
        "cancelled": 0, "running": 0, "pending": 3, "mean_reward": None,
    }  # fmt: skip


def test_status_shows_config_without_the_task_app_key(client_alice):
    job_id = create(client_alice).json()["job_id"]
    body = client_alice.get(f"{JOBS}/{job_id}").json()
    assert body["config"]["has_task_app_api_key"] is True
    assert body["config"]["policy"]["model"] == "gpt-4o-mini"
    assert body["config"]["seeds_count"] == 3
    assert {"job_id", "status", "error", "created_at", "started_at", "completed_at"} <= body.keys()


def test_task_app_key_is_encrypted_at_rest(client_alice):
    job_id = create(client_alice).json()["job_id"]
    job = EvalJob.objects.get(pk=job_id)
    assert SECRET not in job.task_app_api_key_encrypted
    from evalhub import crypto

    assert crypto.decrypt(job.task_app_api_key_encrypted) == SECRET


def test_the_task_app_key_appears_in_no_response(client_alice, caplog):
    created = create(client_alice)
    job_id = created.json()["job_id"]
    responses = [
        created,
        client_alice.get(f"{JOBS}/{job_id}"),
        client_alice.get(f"{JOBS}/{job_id}/results"),
        client_alice.get(f"{JOBS}/{job_id}/events"),
        client_alice.get(JOBS),
        client_alice.get(f"{JOBS}/{job_id}/traces"),
        client_alice.post(f"{JOBS}/{job_id}/cancel"),
    ]
    for response in responses:
        assert response.status_code == 200 or response.status_code == 201
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert SECRET.encode() not in body
    assert SECRET not in caplog.text


def test_secrets_under_secret_named_keys_of_the_settings_are_shown_redacted(client_alice):
    # A policy's, an environment's or the metadata's credentials reach the task app as given,
    # and every answer, list and page shows them as <redacted>.
    secrets = ["sk-policy-key-1234567", "env-password-7654321", "meta-token-abcdefg"]
    created = create(
        client_alice,
        policy={"model": "gpt-4o-mini", "api_key": secrets[0],
                "extra_headers": {"Authorization": f"Bearer {secrets[0]}"}},
        env_config={"difficulty": 2, "nested": [{"password": secrets[1]}], "api_key": None},
        metadata={"access_token": secrets[2], "team": "rl"},
    )  # fmt: skip
    job_id = created.json()["job_id"]
    shown = client_alice.get(f"{JOBS}/{job_id}").json()
    assert shown["config"]["policy"] == {"model": "gpt-4o-mini", "api_key": "<redacted>",
                                         "extra_headers": {"Authorization": "<redacted>"}}  # fmt: skip
    assert shown["config"]["env_config"] == {"difficulty": 2, "nested": [{"password": "<redacted>"}],
                                             "api_key": None}  # fmt: skip
    assert shown["metadata"] == {"access_token": "<redacted>", "team": "rl"}
    page = Client()
    page.force_login(EvalJob.objects.get(pk=job_id).owner)
    responses = (created, client_alice.get(JOBS), page.get(f"/jobs/{job_id}/"))
    assert [r.status_code for r in responses] == [201, 200, 200]
    for response in responses:
        assert not [s for s in secrets if s in response.content.decode()], response.content[:300]
    job = EvalJob.objects.get(pk=job_id)  # kept whole: the task app and a replay get them
    assert job.policy["api_key"] == secrets[0]
    assert job.env_config["nested"][0]["password"] == secrets[1]


@pytest.mark.parametrize(
    "method,suffix",
    [("get", ""), ("get", "/results"), ("get", "/traces"), ("post", "/cancel"), ("get", "/events")],
)
def test_another_accounts_job_is_404(client_alice, client_bob, method, suffix):
    job_id = create(client_alice).json()["job_id"]
    response = getattr(client_bob, method)(f"{JOBS}/{job_id}{suffix}")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert EvalJob.objects.get(pk=job_id).status == "pending"  # bob's cancel did nothing


def test_unknown_job_is_404(client_alice):
    assert client_alice.get(f"{JOBS}/eval-doesnotexist").status_code == 404


def test_no_key_wrong_key_and_malformed_header_are_401(db, client_alice):
    from rest_framework.test import APIClient

    anonymous = APIClient()
    assert anonymous.get(JOBS).status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer ehk_00000000_notakey")
    assert wrong.get(JOBS).status_code == 401
    basic = APIClient()
    basic.credentials(HTTP_AUTHORIZATION="Basic dXNlcjpwYXNz")
    response = basic.post(JOBS, job_body(), format="json")
    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]
    assert EvalJob.objects.count() == 0


def test_revoked_key_is_401(client_alice):
    assert client_alice.get(JOBS).status_code == 200
    prefix = client_alice.api_key.split("_")[1]
    api_key_revoke(prefix=prefix)
    assert client_alice.get(JOBS).status_code == 401


def test_key_records_last_use_and_is_stored_hashed(client_alice):
    key = ApiKey.objects.get()
    assert key.last_used_at is None
    client_alice.get(JOBS)
    key.refresh_from_db()
    assert key.last_used_at is not None
    assert client_alice.api_key not in key.key_hash
    assert client_alice.api_key.startswith(f"ehk_{key.prefix}_")


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("task_app_url", None),
        ("task_app_url", "ftp://example.com"),
        ("task_app_url", "not a url"),
        ("task_app_url", "http://"),
        ("task_app_url", "http://example.com/app?token=s3cret"),
        ("task_app_url", "http://example.com/app#rollout"),
        ("seeds", []),
        ("seeds", "0,1,2"),
        ("seeds", [1, 2, "3"]),
        ("seeds", [1, 2.5]),
        ("seeds", [1, True]),
        ("seeds", [1, 2, 2]),
        ("seeds", [2**70]),
        ("max_concurrent", 0),
        ("max_concurrent", 10**9),
        ("max_concurrent", "5"),
        ("timeout", 0),
        ("timeout", -1),
        ("timeout", 10**9),
        ("timeout", "fast"),
        ("policy", "gpt-4"),
        ("policy", [1]),
        ("env_config", "x"),
        ("mode", "train"),
    ],
)
def test_bad_field_is_400_naming_the_field(client_alice, field, value):
    body = job_body(**{field: value})
    if value is None:
        del body[field]
    response = client_alice.post(JOBS, body, format="json")
    assert response.status_code == 400, response.content
    payload = response.json()
    assert field in payload["fields"]
    assert field in payload["detail"]
    assert EvalJob.objects.count() == 0


def test_a_task_app_url_with_a_query_is_refused_without_echoing_it(client_alice):
    # Routes are added to the URL's end (/rollout): after a query they would be lost in it.
    body = job_body(task_app_url="https://example.com/app?api_key=sk-query-secret-123")
    response = client_alice.post(JOBS, body, format="json")
    assert response.status_code == 400, response.content
    assert "query" in response.json()["fields"]["task_app_url"][0]
    assert "sk-query-secret-123" not in response.content.decode()


def test_an_unknown_format_is_400_naming_it_and_a_known_one_is_served(client_alice):
    job_id = create(client_alice).json()["job_id"]
    response = client_alice.get(f"{JOBS}/{job_id}?format=xml")
    assert response.status_code == 400, response.content
    assert response.json()["fields"] == {"format": ["must be one of: json"]}
    assert client_alice.get(f"{JOBS}/{job_id}?format=json").json()["job_id"] == job_id
    schema = client_alice.get("/api/schema?format=json")  # the schema's own formats still serve
    assert schema.status_code == 200 and schema.json()["info"]["title"] == "evalhub API"


def test_missing_seeds_is_400(client_alice):
    body = job_body()
    del body["seeds"]
    response = client_alice.post(JOBS, body, format="json")
    assert response.status_code == 400
    assert "seeds" in response.json()["fields"]


def test_too_many_seeds_is_400(client_alice, settings):
    settings.EVALHUB_MAX_SEEDS = 10
    response = create(client_alice, seeds=list(range(11)))
    assert response.status_code == 400
    assert "at most 10" in response.json()["fields"]["seeds"][0]


def test_body_that_is_not_json_is_400(client_alice):
    response = client_alice.post(JOBS, data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "body" in response.json()["fields"]


def test_body_that_is_a_list_is_400(client_alice):
    response = client_alice.post(JOBS, data=json.dumps([1, 2]), content_type="application/json")
    assert response.status_code == 400
    assert "body" in response.json()["fields"]


def test_oversized_body_is_413(client_alice, settings):
    settings.EVALHUB_MAX_REQUEST_BYTES = 2048
    response = create(client_alice, env_config={"blob": "x" * 4096})
    assert response.status_code == 413
    assert response.json()["error"] == "request_too_large"
    assert EvalJob.objects.count() == 0


def test_optional_fields_may_be_null(client_alice):
    response = create(
        client_alice, task_app_api_key=None, app_id=None, env_name=None, policy=None,
        env_config=None, verifier_config=None, mode=None, max_concurrent=None, timeout=None,
    )  # fmt: skip
    assert response.status_code == 201, response.content
    job = EvalJob.objects.get(pk=response.json()["job_id"])
    assert (job.max_concurrent, job.timeout_s, job.mode, job.policy) == (5, 600.0, "eval", {})
    assert not job.has_task_app_api_key


# --- list, pagination, filters ------------------------------------------------------------------


def test_list_is_newest_first_paginated_by_cursor_and_filtered_by_status(client_alice, client_bob):
    ids = [create(client_alice, seeds=[i]).json()["job_id"] for i in range(5)]
    create(client_bob)
    client_alice.post(f"{JOBS}/{ids[1]}/cancel")

    page1 = client_alice.get(JOBS, {"limit": 2}).json()
    assert [j["job_id"] for j in page1["jobs"]] == [ids[4], ids[3]]
    assert page1["has_more"] is True
    page2 = client_alice.get(JOBS, {"limit": 2, "cursor": page1["next_cursor"]}).json()
    assert [j["job_id"] for j in page2["jobs"]] == [ids[2], ids[1]]
    page3 = client_alice.get(JOBS, {"limit": 2, "cursor": page2["next_cursor"]}).json()
    assert [j["job_id"] for j in page3["jobs"]] == [ids[0]]
    assert page3["has_more"] is False and page3["next_cursor"] is None

    cancelled = client_alice.get(JOBS, {"status": "cancelled"}).json()["jobs"]
    assert [j["job_id"] for j in cancelled] == [ids[1]]
    pending = client_alice.get(JOBS, {"status": "pending"}).json()["jobs"]
    assert len(pending) == 4


@pytest.mark.parametrize(
    "params,field",
    [({"limit": 0}, "limit"), ({"limit": "x"}, "limit"), ({"status": "nope"}, "status")],
)
def test_list_rejects_bad_parameters(client_alice, params, field):
    response = client_alice.get(JOBS, params)
    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_cancel_marks_pending_seeds_cancelled_and_is_idempotent(client_alice):
    job_id = create(client_alice).json()["job_id"]
    first = client_alice.post(f"{JOBS}/{job_id}/cancel")
    assert first.status_code == 200 and first.json()["status"] == "cancelled"
    assert set(SeedRun.objects.filter(job_id=job_id).values_list("status", flat=True)) == {
        "cancelled"
    }
    again = client_alice.post(f"{JOBS}/{job_id}/cancel")
    assert again.json()["status"] == "cancelled"
    events = client_alice.get(f"{JOBS}/{job_id}/events").json()["events"]
    assert [e["type"] for e in events] == ["eval.policy.job.created", "eval.policy.job.cancelled"]


def test_results_repeat_summary_at_top_level(client_alice):
    job_id = create(client_alice, seeds=[1, 2]).json()["job_id"]
    body = client_alice.get(f"{JOBS}/{job_id}/results").json()
    for key in (
        "mean_score",
        "total_tokens",
        "total_cost_usd",
        "num_seeds",
        "num_successful",
        "num_failed",
    ):
        assert key in body["summary"]
        assert body[key] == body["summary"][key]
    assert body["summary"]["num_seeds"] == 2
    assert [r["seed"] for r in body["results"]] == [1, 2]


def test_traces_is_a_zip(client_alice):
    import io
    import zipfile

    job_id = create(client_alice, seeds=[4]).json()["job_id"]
    response = client_alice.get(f"{JOBS}/{job_id}/traces")
    assert response["Content-Type"] == "application/zip"
    names = zipfile.ZipFile(
        io.BytesIO(b"".join(response.streaming_content) if response.streaming else response.content)
    ).namelist()
    assert "manifest.json" in names


def test_openapi_schema_and_docs_are_served(client_alice, settings):
    schema = client_alice.get("/api/schema")
    assert schema.status_code == 200
    assert b"/api/eval/jobs" in schema.content
    assert client_alice.get("/api/docs").status_code == 200
    # Our fields' and keys' schema extensions (jobs.api.schema) applied: bounds, bearer keys.
    document = client_alice.get("/api/schema?format=json").json()
    field = document["components"]["schemas"]["JobCreateInput"]["properties"]["max_concurrent"]
    bounds = ("int64", 1, settings.EVALHUB_MAX_CONCURRENT)
    assert (field["format"], field["minimum"], field["maximum"]) == bounds
    assert document["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"


def test_healthz_reports_database_and_broker(db, client):
    body = client.get("/healthz").json()
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"] == "ok"
