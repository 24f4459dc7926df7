"""Reading RolloutResponses defensively, and what counts as transient."""

from __future__ import annotations

import json

import pytest

from jobs.scores import Scores
from jobs.taskapp import TaskAppError, headers_for, rollout_response_parse


def parse(body, status=200):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return rollout_response_parse(status_code=status, content=content)


def test_score_is_outcome_reward_then_outcome_score_then_reward_mean():
    assert (
        parse(
            {"metrics": {"outcome_reward": 0.1, "outcome_score": 0.2, "reward_mean": 0.3}}
        ).scores.score
        == 0.1
    )
    assert parse({"metrics": {"outcome_score": 0.2, "reward_mean": 0.3}}).scores.score == 0.2
    assert parse({"metrics": {"reward_mean": 0.3}}).scores.score == 0.3
    assert parse({"metrics": {"outcome_reward": 0}}).scores.score == 0.0


def test_keeps_the_other_scores_details_and_trace():
    outcome = parse(
        {
            "metrics": {
                "outcome_reward": 1,
                "reward_mean": 0.5,
                "events_score": 0.25,
                "details": {"verifier_score": 0.75},
            },
            "trace": {"steps": []},
        }
    )
    assert outcome.scores == Scores(
        score=1.0, reward_mean=0.5, events_score=0.25, verifier_score=0.75
    )
    assert outcome.trace == {"steps": []}
    assert outcome.metrics["details"] == {"verifier_score": 0.75}
    assert parse({"metrics": {"outcome_reward": 1}, "trace": "a string"}).trace is None


@pytest.mark.parametrize(
    "body,why",
    [
        (b"<html>", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        ([1], "not an object"),
        ({"run_id": "x"}, "no `metrics`"),
        ({"metrics": [1]}, "no `metrics`"),
        ({"metrics": {}}, "none of outcome_reward"),
        ({"metrics": {"outcome_reward": "1"}}, "not a finite number"),
        ({"metrics": {"outcome_reward": True}}, "not a finite number"),
        (b'{"metrics": {"outcome_reward": NaN}}', "not a finite number"),
        ({"metrics": {"outcome_reward": 1, "details": {"verifier_score": {}}}}, "verifier_score"),
    ],
)
def test_malformed_answers_are_permanent_errors_that_say_what_is_wrong(body, why):
    with pytest.raises(TaskAppError) as info:
        parse(body)
    assert why in info.value.message
    assert info.value.message.startswith("invalid RolloutResponse")
    assert info.value.transient is False


@pytest.mark.parametrize(
    "status,transient",
    [(429, True), (500, True), (503, True), (400, False), (401, False), (404, False), (422, False)],
)
def test_429_and_5xx_are_transient_other_4xx_are_not(status, transient):
    with pytest.raises(TaskAppError) as info:
        parse(b"nope", status=status)
    assert info.value.transient is transient
    assert info.value.http_status == status
    assert f"HTTP {status}: nope" in info.value.message


def test_the_key_goes_in_all_three_headers_and_none_without_a_key():
    assert headers_for("k") == {"X-API-Key": "k", "Authorization": "Bearer k", "X-API-Keys": "k"}
    assert headers_for(None) == {}
