"""Asking for a replay (docs/replay.md) through the API: what is refused, naming the field, and
what a replay job is made of; on rows written as the workers write them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from evalhub import crypto
from jobs.models import EvalJob
from tests.frontend.job_rows import TASK_APP_KEY, job_finish, job_make
from tests.jobs.test_api import create

JOBS = "/api/eval/jobs"


@pytest.fixture
def ended(client_alice) -> EvalJob:
    """Alice's job of seeds 1, 2, 3 with two repeats, ended."""
    owner = get_user_model().objects.get(username="alice")
    job = job_make(owner=owner, seeds=[1, 2, 3], repeats=2, name="nightly")
    job_finish(job=job)
    return job


def error_of(response, status: int = 400) -> dict:
    assert response.status_code == status, response.content
    return response.json()


@pytest.mark.parametrize(
    ("replay", "field"),
    [
        ({"job_id": "eval-nosuchjob"}, "job_id"),
        ({"job_id": ""}, "job_id"),
        ({"job_id": 7}, "job_id"),
        ({"job_id": "JOB", "on_miss": "retry"}, "on_miss"),
        ({"job_id": "JOB", "on_mis": "fail"}, "on_mis"),
    ],
)
def test_a_bad_replay_is_a_400_naming_its_field(client_alice, ended, replay, field):
    replay = {k: ended.id if v == "JOB" else v for k, v in replay.items()}
    body = error_of(create(client_alice, seeds=[1], replay=replay))
    assert list(body["fields"]["replay"]) == [field]
    assert body["detail"].startswith("Invalid request. replay: ")


def test_another_accounts_job_cannot_be_replayed_and_reads_as_no_job(client_bob, ended):
    body = error_of(create(client_bob, seeds=[1], replay={"job_id": ended.id}))
    assert body["fields"] == {"replay": {"job_id": ["no job of yours has this id"]}}
    answer = client_bob.post(f"{JOBS}/{ended.id}/replay", {}, format="json")
    assert error_of(answer, 404)["error"] == "not_found"


def test_seeds_and_repeats_the_replayed_job_did_not_run_are_refused(client_alice, ended):
    body = error_of(create(client_alice, seeds=[1, 9], replay={"job_id": ended.id}))
    assert body["fields"] == {"seeds": ["the replayed job did not run seeds [9]"]}
    body = error_of(create(client_alice, seeds=[1], repeats=3, replay={"job_id": ended.id}))
    assert list(body["fields"]) == ["repeats"]


def test_a_job_still_running_is_replayed_once_it_ends(client_alice):
    owner = get_user_model().objects.get(username="alice")
    running = job_make(owner=owner, seeds=[1])
    body = error_of(create(client_alice, seeds=[1], replay={"job_id": running.id}))
    assert "replay it once it ends" in body["fields"]["replay"]["job_id"][0]
    answer = client_alice.post(f"{JOBS}/{running.id}/replay", {}, format="json")
    assert error_of(answer, 409)["error"] == "job_not_finished"


def test_the_replay_endpoint_makes_the_job_again_with_overrides(client_alice, ended):
    bad = client_alice.post(f"{JOBS}/{ended.id}/replay", {"on_miss": "sometimes"}, format="json")
    assert list(error_of(bad)["fields"]) == ["on_miss"]
    answer = client_alice.post(
        f"{JOBS}/{ended.id}/replay",
        {"seeds": [2, 3], "env_config": {"split": "hard"}, "on_miss": "call",
         "task_app_url": "http://127.0.0.1:8123"},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 201, answer.content
    config = answer.json()["config"]
    assert (config["replay_of"], config["replay_on_miss"]) == (ended.id, "call")
    assert config["task_app_url"] == "http://127.0.0.1:8123"
    job = EvalJob.objects.get(pk=answer.json()["job_id"])
    assert (job.replay_of_id, job.replay_on_miss, job.env_config) == (
        ended.id,
        "call",
        {"split": "hard"},
    )
    assert (job.num_seeds, job.repeats, job.name) == (2, 2, "nightly (replay)")
    assert (job.policy, job.max_concurrent) == (ended.policy, ended.max_concurrent)
    assert crypto.decrypt(job.task_app_api_key_encrypted) == TASK_APP_KEY


def test_a_replay_asked_at_create_defaults_to_failing_on_a_miss(client_alice, ended):
    answer = create(client_alice, seeds=[3], replay={"job_id": ended.id})
    assert answer.status_code == 201, answer.content
    assert answer.json()["config"]["replay_on_miss"] == "fail"
    plain = create(client_alice, seeds=[3]).json()["config"]
    assert (plain["replay_of"], plain["replay_on_miss"]) == (None, None)


@pytest.mark.parametrize(
    ("cache", "field"),
    [
        ({"scope": "everyone"}, "scope"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"ttl_s": "1h"}, "ttl_s"),
        ({"ttl_s": 10**9}, "ttl_s"),
        ({"scop": "job"}, "scop"),
    ],
)
def test_a_bad_cache_is_a_400_naming_its_field(client_alice, cache, field):
    body = error_of(create(client_alice, seeds=[1], cache=cache))
    assert list(body["fields"]["cache"]) == [field]


def test_a_cache_is_kept_with_its_defaults_and_shown_with_the_job(client_alice):
    answer = create(client_alice, seeds=[1], cache={"scope": "account"})
    assert answer.status_code == 201, answer.content
    assert answer.json()["config"]["cache"] == {"scope": "account", "ttl_s": 86400.0}
    assert create(client_alice, seeds=[1]).json()["config"]["cache"] is None


def test_an_idempotency_key_makes_a_retried_replay_return_the_first(client_alice, ended):
    at, body = f"{JOBS}/{ended.id}/replay", {"seeds": [2, 3], "on_miss": "call"}
    first = client_alice.post(at, body, format="json", HTTP_IDEMPOTENCY_KEY="replay-7")
    assert first.status_code == 201, first.content
    again = client_alice.post(at, body, format="json", HTTP_IDEMPOTENCY_KEY="replay-7")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["job_id"] == first.json()["job_id"]
    assert again.json()["config"]["replay_of"] == ended.id
    assert EvalJob.objects.filter(replay_of=ended).count() == 1
    # The same key with another body, or on a create, is the create endpoint's 422.
    other = client_alice.post(at, {"seeds": [3]}, format="json", HTTP_IDEMPOTENCY_KEY="replay-7")
    created = client_alice.post(
        JOBS, {"task_app_url": "http://127.0.0.1:9", "seeds": [1]}, format="json",
        HTTP_IDEMPOTENCY_KEY="replay-7",
    )  # fmt: skip
    for refused in (other, created):
        assert error_of(refused, 422)["error"] == "idempotency_key_reused"
        assert first.json()["job_id"] in refused.json()["fields"]["Idempotency-Key"][0]
    bad = client_alice.post(at, body, format="json", HTTP_IDEMPOTENCY_KEY="a b")
    assert "Idempotency-Key" in error_of(bad)["fields"]
    assert client_alice.post(at, body, format="json").status_code == 201  # no key: a new job
    assert EvalJob.objects.filter(replay_of=ended).count() == 2


def test_concurrent_replays_with_one_key_make_one_job(transactional_db, make_client):
    clients = [make_client("alice") for _ in range(4)]
    job = job_make(owner=get_user_model().objects.get(username="alice"), seeds=[1, 2])
    job_finish(job=job)
    barrier = threading.Barrier(len(clients))

    def replay(client) -> tuple[int, str]:
        try:
            barrier.wait(timeout=30)
            answer = client.post(f"{JOBS}/{job.id}/replay", {}, format="json",
                                 HTTP_IDEMPOTENCY_KEY="race-1")  # fmt: skip
            return answer.status_code, answer.json()["job_id"]
        finally:
            connection.close()

    with ThreadPoolExecutor(len(clients)) as pool:
        answers = list(pool.map(replay, clients))
    assert sorted(code for code, _ in answers) == [200, 200, 200, 201], answers
    assert len({job_id for _, job_id in answers}) == 1
    assert EvalJob.objects.filter(replay_of=job).count() == 1
