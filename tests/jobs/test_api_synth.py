"""What newer synth-ai clients (0.5 to 0.7.3) send and read beyond 0.4.4's calls."""

from __future__ import annotations

import pytest

from jobs.events import seed_event_append
from jobs.models import EvalJob, SeedRun, SeedStatus
from tests.jobs.test_api import JOBS, create


@pytest.mark.parametrize("source", ["task_app", "verifier", "fused", " Fused "])
def test_verifier_config_with_a_known_reward_source_is_kept_and_shown(client_alice, source):
    config = {"enabled": True, "reward_source": source, "weight_env": 0.5, "backend_model": "m"}
    response = create(client_alice, verifier_config=config)
    assert response.status_code == 201, response.content
    job_id = response.json()["job_id"]
    assert EvalJob.objects.get(pk=job_id).verifier_config == config
    assert client_alice.get(f"{JOBS}/{job_id}").json()["config"]["verifier_config"] == config


@pytest.mark.parametrize(
    "config,why",
    [
        ({"reward_source": "oracle"}, "reward_source must be one of task_app, verifier, fused"),
        ({"reward_source": 3}, "reward_source must be one of"),
        ({"enabled": "yes"}, "enabled must be true or false"),
        ({"weight_event": -1}, "weight_event must be a number from 0 to 1000000"),
    ],
)
def test_a_bad_verifier_config_is_a_400_naming_the_field(client_alice, config, why):
    response = create(client_alice, verifier_config=config)
    assert response.status_code == 400
    body = response.json()
    assert "verifier_config" in body["fields"] and why in body["detail"]


def test_ops_of_the_0_5_cli_are_accepted_and_must_be_a_list_of_strings(client_alice):
    assert create(client_alice, ops=["agent", "env"]).status_code == 201
    bad = create(client_alice, ops="agent")
    assert bad.status_code == 400 and "ops" in bad.json()["fields"]


def test_cancel_takes_a_reason_and_answers_job_id_status_and_message(client_alice):
    job_id = create(client_alice).json()["job_id"]
    answer = client_alice.post(
        f"{JOBS}/{job_id}/cancel", {"reason": "no longer needed"}, format="json"
    ).json()
    assert answer["job_id"] == job_id and answer["status"] == "cancelled"
    assert answer["message"] == "Job cancelled: no longer needed"
    assert client_alice.post(f"{JOBS}/{job_id}/cancel").json()["message"] == "Job cancelled."
    assert (
        client_alice.post(f"{JOBS}/{job_id}/cancel", {"reason": 5}, format="json").status_code
        == 200
    )


def test_cancelling_a_finished_job_says_so(client_alice):
    job_id = create(client_alice).json()["job_id"]
    EvalJob.objects.filter(pk=job_id).update(status="completed")
    answer = client_alice.post(f"{JOBS}/{job_id}/cancel", {}, format="json").json()
    assert answer["status"] == "completed" and "already completed" in answer["message"]


def test_status_and_events_carry_mean_reward_and_progress(client_alice):
    job_id = create(client_alice, seeds=[1, 2, 3]).json()["job_id"]
    for seed, score in ((1, 0.5), (2, 1.0)):
        SeedRun.objects.filter(job_id=job_id, seed=seed).update(
            status=SeedStatus.SUCCEEDED, score=score
        )
        seed_event_append(seed_run=SeedRun.objects.get(job_id=job_id, seed=seed))
    status = client_alice.get(f"{JOBS}/{job_id}").json()
    assert status["results"]["mean_reward"] == 0.75 and status["results"]["completed"] == 2
    page = client_alice.get(f"{JOBS}/{job_id}/events?since_seq=1&limit=1").json()
    assert page["next_seq"] == 2 and page["has_more"] is True
    (event,) = page["events"]
    assert event["data"]["seed_status"] == "succeeded" and "status" not in event["data"]
    assert (event["data"]["completed"], event["data"]["total"]) == (1, 3)
    created = client_alice.get(f"{JOBS}/{job_id}/events").json()["events"][0]["data"]
    assert (created["completed"], created["total"]) == (0, 3)


def test_the_streamer_of_0_6_and_0_7_finds_status_and_events_without_the_api_prefix(
    client_alice, client_bob
):
    job_id = create(client_alice).json()["job_id"]
    assert client_alice.get(f"/eval/jobs/{job_id}").json()["job_id"] == job_id
    assert client_alice.get(f"/eval/jobs/{job_id}/events").json()["events"]
    assert client_bob.get(f"/eval/jobs/{job_id}").status_code == 404


def test_workflow_state_is_the_jobs_state(client_alice, client_bob):
    job_id = create(client_alice, seeds=[1, 2]).json()["job_id"]
    state = client_alice.get(f"/api/jobs/{job_id}/workflow-state").json()
    assert state["workflow_state"]["status"] == "pending"
    assert state["workflow_state"]["progress"] == "0/2 seeds completed"
    assert client_bob.get(f"/api/jobs/{job_id}/workflow-state").status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/crypto/public-key", "/api/v1/env-keys"])
def test_sealed_task_app_keys_are_not_served_and_the_404_says_what_to_do(client_alice, path):
    for response in (client_alice.get(path), client_alice.post(path, {}, format="json")):
        assert response.status_code == 404
        assert response.json()["error"] == "not_served"
        assert "task_app_api_key" in response.json()["detail"]
