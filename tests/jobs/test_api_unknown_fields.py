"""Fields of a job body evalhub does not know: accepted (clients send fields of their own), kept
out of the job, and named in the answer with the closest known field, so a typo that would
silently lose a setting (`max_cost_usd`, `max_concurrent`) is seen."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client

from jobs.fields import MAX_WARNINGS
from jobs.models import EvalJob
from jobs.public import job_warnings
from tests.jobs.test_api import JOBS, create, job_body


def test_a_misspelt_field_is_accepted_not_used_and_named_with_the_closest_known_one(
    client_alice,
):
    response = create(client_alice, max_concurent=3, max_cost_usdd=0.5)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["warnings"] == [
        {
            "field": "max_concurent",
            "closest": "max_concurrent",
            "message": "unknown field, not used; did you mean max_concurrent?",
        },
        {
            "field": "max_cost_usdd",
            "closest": "max_cost_usd",
            "message": "unknown field, not used; did you mean max_cost_usd?",
        },
    ]
    job = EvalJob.objects.get(pk=body["job_id"])
    assert job.max_concurrent == 2 and job.max_cost_usd is None  # the body's own max_concurrent
    assert job_warnings(job) == body["warnings"]


def test_a_field_like_no_known_one_is_named_without_a_closest(client_alice):
    body = create(client_alice, my_own_label="x").json()
    assert body["warnings"] == [
        {"field": "my_own_label", "closest": None, "message": "unknown field, not used"}
    ]


def test_a_body_of_known_fields_has_no_warnings_and_neither_has_its_job(client_alice):
    body = create(client_alice, ops=["agent"], name="n", tags=["a"]).json()
    assert body["warnings"] == []
    assert job_warnings(EvalJob.objects.get(pk=body["job_id"])) == []


def test_a_near_miss_in_verifier_config_is_named_and_other_programs_fields_are_not(
    client_alice,
):
    config = {"enabeld": True, "backend_model": "m", "kind": "exact", "backend_base": "x"}
    body = create(client_alice, verifier_config=config).json()
    assert [(w["field"], w["closest"]) for w in body["warnings"]] == [
        ("verifier_config.enabeld", "verifier_config.enabled")
    ]
    assert EvalJob.objects.get(pk=body["job_id"]).verifier_config == config  # kept as sent


def test_env_config_keys_are_checked_for_the_kinds_evalhub_drives_itself(client_alice):
    mcp = create(
        client_alice, task_app_kind="mcp_gym", policy={"model": "m"},
        env_config={"max_step": 5, "env_context": {}},
    ).json()  # fmt: skip
    assert [(w["field"], w["closest"]) for w in mcp["warnings"]] == [
        ("env_config.max_step", "env_config.max_steps")
    ]
    # A synth task app reads its own env_config: any key is its business.
    assert create(client_alice, env_config={"max_step": 5}).json()["warnings"] == []


def test_a_replay_of_the_same_key_answers_the_same_warnings(client_alice):
    body = job_body(max_concurent=3)
    headers = {"HTTP_IDEMPOTENCY_KEY": "k-unknown-1"}
    first = client_alice.post(JOBS, body, format="json", **headers)
    again = client_alice.post(JOBS, body, format="json", **headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["warnings"] == first.json()["warnings"] != []


def test_many_unknown_fields_are_answered_in_a_bounded_list(client_alice):
    body = create(client_alice, **{f"extra_{i}": i for i in range(500)}).json()
    assert len(body["warnings"]) == MAX_WARNINGS


def test_the_job_page_shows_the_fields_that_were_not_used(client_alice):
    job_id = create(client_alice, max_concurent=3).json()["job_id"]
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="alice"))
    html = browser.get(f"/jobs/{job_id}/").content.decode()
    assert "data-warnings" in html
    assert "<code>max_concurent</code> (did you mean <code>max_concurrent</code>?)" in html
