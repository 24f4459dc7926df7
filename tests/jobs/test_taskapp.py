"""Reading RolloutResponses defensively, and what counts as transient."""

from __future__ import annotations

import json

import pytest

from jobs.figures import JsonText
from jobs.scores import Scores
from jobs.worker.answer_budget import SMALL_BYTES, AnswerBudget, AnswerHold, answer_cost
from jobs.worker.episode import RolloutOutcome, TaskAppError
from jobs.worker.taskapp import (
    headers_for,
    kept_as_text,
    rollout_response_parse,
)


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


def test_reward_info_of_synth_ai_0_5_and_later_is_read_like_metrics():
    outcome = parse(
        {
            "trace_correlation_id": "t-1",
            "reward_info": {
                "outcome_reward": 0.5,
                "outcome_objectives": {"reward": 0.5, "latency": 0.25},
                "event_rewards": [0.1, 0.4],
                "details": {"verifier_score": 0.75},
            },
            "trace": {"schema_version": "4.0", "event_history": [{"type": "lm"}]},
            "success_status": "success",
            "status_detail": "ok",
            "artifact": [{"content": "print(1)", "content_type": "python"}],
        }
    )
    assert outcome.scores == Scores(score=0.5, verifier_score=0.75)
    assert outcome.outcome_objectives == {"reward": 0.5, "latency": 0.25}
    assert outcome.trace["event_history"] == [{"type": "lm"}]
    assert outcome.metrics["event_rewards"] == [0.1, 0.4]
    assert outcome.metrics["success_status"] == "success"
    assert outcome.metrics["status_detail"] == "ok"
    assert outcome.metrics["artifact"][0]["content"] == "print(1)"


def test_reward_info_wins_over_metrics_and_a_null_reward_info_falls_back():
    both = {"reward_info": {"outcome_reward": 1}, "metrics": {"outcome_reward": 0}}
    assert parse(both).scores.score == 1.0
    assert parse({"reward_info": None, "metrics": {"outcome_reward": 0.5}}).scores.score == 0.5


def test_score_falls_back_to_outcome_objectives_reward_before_outcome_score():
    body = {"reward_info": {"outcome_objectives": {"reward": 0.25}, "outcome_score": 0.5}}
    assert parse(body).scores.score == 0.25
    assert (
        parse({"metrics": {"outcome_objectives": {"x": 1}, "outcome_score": 0.5}}).scores.score
        == 0.5
    )


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
        ({"reward_info": {}}, "reward_info has none of outcome_reward"),
        ({"reward_info": {"outcome_reward": "x"}}, "reward_info.outcome_reward is 'x'"),
        ({"reward_info": {"outcome_reward": 1, "outcome_objectives": [1]}}, "not an object"),
        (
            {"reward_info": {"outcome_reward": 1, "outcome_objectives": {"reward": "hi"}}},
            "reward_info.outcome_objectives.reward is 'hi'",
        ),
        ({"reward_info": {"outcome_reward": 1}, "success_status": 3}, "success_status is 3"),
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


def test_a_big_outcome_is_kept_as_its_json_text_and_charged_what_the_text_costs():
    budget = AnswerBudget(256 * SMALL_BYTES)
    small = RolloutOutcome(scores=Scores(score=1.0), metrics={"outcome_reward": 1.0},
                           trace={"steps": [1, 2]})  # fmt: skip
    hold = AnswerHold(budget)
    assert kept_as_text(small, hold) is small
    assert 0 < hold.nbytes < answer_cost(100)
    trace = {"messages": [{"role": "tool", "content": "é" * SMALL_BYTES}]}
    big = kept_as_text(RolloutOutcome(scores=Scores(score=1.0), trace=trace), hold)
    assert isinstance(big.trace, JsonText) and json.loads(big.trace.text) == trace
    assert isinstance(big.metrics, JsonText) and json.loads(big.metrics.text) == {}
    assert big.scores == Scores(score=1.0)
    # Its text is Latin-1 held as one byte a character: the charge is the text's memory.
    assert answer_cost(SMALL_BYTES) <= hold.nbytes == budget.used < answer_cost(SMALL_BYTES + 200)
    hold.release()
    assert budget.used == 0
