"""The judge's calls replayed (docs/replay.md): a replay of a judged job, and re-judging it,
answered from the recorded judge calls through the real worker, interceptor and fake provider;
a new judge asks the provider. One judged job is the recording of every step."""

from __future__ import annotations

import time

import pytest

from evalhub.fakeprovider import JUDGE_USAGE
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create
from tests.verifier.test_judge import job_run
from traces.models import CallState, LLMCall, ReplayMark

pytestmark = pytest.mark.worker

JOBS = "/api/eval/jobs"
# The judge's first answer is malformed and its second try answers: two calls per judgement,
# the second's request holding the first's answer.
VERIFIER = {"enabled": True, "reward_source": "verifier", "rubric": "fake-judge:malformed-once"}


def results(stack, job_id: str) -> dict:
    """The job's results once it has ended and its calls are saved (the interceptor saves a
    call a moment after answering it, so a job may end first)."""

    def settled():
        first = stack.get(f"{JOBS}/{job_id}/results").json()
        time.sleep(0.3)
        calls = LLMCall.objects.filter(attempt__seed_run__job_id=job_id)
        in_flight = calls.filter(state=CallState.IN_FLIGHT).exists()
        second = stack.get(f"{JOBS}/{job_id}/results").json()
        ended = second["status"] in ("completed", "failed", "cancelled")
        return second if ended and first == second and not in_flight else None

    return wait_until(settled, timeout=90, what=f"job {job_id} ended, its calls saved")


def run(stack, path: str, body: dict) -> dict:
    """POST a replay or a re-judgement; its results once it has ended."""
    response = stack.post(path, body)
    assert response.status_code == 201, response.text
    return results(stack, response.json()["job_id"])


def by_seed(answer: dict) -> dict[int, dict]:
    return {row["seed"]: row for row in answer["results"]}


def judge_marks(job_id: str) -> list[str]:
    calls = LLMCall.objects.filter(attempt__seed_run__job_id=job_id, kind="judge")
    return sorted(calls.values_list("replay", flat=True))


def assert_judged_for_nothing(answer: dict, recorded: dict) -> None:
    """Every judgement answered from the recording: the same verdicts, the same tokens,
    nothing spent, what the recording cost said."""
    assert answer["status"] == "completed", answer["error"]
    for seed, row in by_seed(answer).items():
        was = by_seed(recorded)[seed]
        assert row["judge_status"] == "done", row["verifier_error"]
        for field in ("verifier_score", "score", "verifier_justification", "judge_tokens"):
            assert row[field] == was[field], (seed, field)
        assert (row["judge_replayed_calls"], row["judge_live_calls"]) == (2, 0)
        assert row["judge_cost_usd"] == 0
        assert row["judge_replayed_cost_usd"] == pytest.approx(was["judge_cost_usd"])
    summary = answer["summary"]
    assert summary["judge_total_cost_usd"] == 0 and summary["judge_replayed_calls"] == 4
    assert summary["judge_replayed_cost_usd"] == pytest.approx(
        recorded["summary"]["judge_total_cost_usd"]
    )
    assert judge_marks(answer["job_id"]) == [ReplayMark.REPLAYED] * 4


def test_a_judged_job_replayed_and_rejudged_with_the_same_judge_reaches_no_provider(stack):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        stack.worker()
        job, _ = job_run(stack, url, VERIFIER, seeds=[0, 1])
        original = results(stack, job.id)
        assert original["summary"]["num_judged"] == 2
        assert original["summary"]["judge_live_calls"] == 4  # a job that replays nothing
        assert original["summary"]["judge_total_cost_usd"] > 0
        stack.fake.reset()
        replay = run(stack, f"{JOBS}/{job.id}/replay", {"on_miss": "fail"})
        assert stack.fake.received == []  # neither the policy's calls nor the judge's
        assert replay["summary"]["replayed_calls"] == 2
        assert_judged_for_nothing(replay, original)
        # Re-judging the replay with the same judge: its recording (the original's) answers.
        rejudged = run(stack, f"{JOBS}/{replay['job_id']}/judge", {"verifier_config": VERIFIER})
        assert stack.fake.received == []
        assert_judged_for_nothing(rejudged, original)
        assert rejudged["summary"]["total_tokens"] == 0  # the rollouts did not run again
        # A new judge prompt must be asked.
        new_judge = {**VERIFIER, "judge_prompt": "You are a strict grader. Answer in JSON."}
        asked = run(stack, f"{JOBS}/{replay['job_id']}/judge", {"verifier_config": new_judge})
    assert len(stack.fake.received) == 4
    assert all(r["body"]["messages"][0]["content"] == new_judge["judge_prompt"]
               for r in stack.fake.received)  # fmt: skip
    for row in asked["results"]:
        assert row["judge_status"] == "done"
        assert (row["judge_replayed_calls"], row["judge_live_calls"]) == (0, 2)
        assert row["judge_divergences"] == 0  # a new judge asked, not a replay missing
        assert row["judge_tokens"] == 2 * sum(JUDGE_USAGE.values()) and row["judge_cost_usd"] > 0
    assert judge_marks(asked["job_id"]) == [ReplayMark.NONE] * 4
    assert asked["summary"]["judge_total_cost_usd"] == pytest.approx(
        original["summary"]["judge_total_cost_usd"]
    )


def test_a_replay_whose_judge_asks_otherwise_fails_the_judgement_or_asks_live(stack):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        stack.worker()
        job, _ = job_run(stack, url, VERIFIER, seeds=[2])
        original = results(stack, job.id)
        stack.fake.reset()
        harsher = {
            "verifier_config": {**VERIFIER, "rubric": "fake-judge:malformed-once. Be harsh."}
        }
        failed = run(stack, f"{JOBS}/{job.id}/replay", {**harsher, "on_miss": "fail"})
        assert stack.fake.received == []
        (row,) = failed["results"]
        # The rollout replayed and succeeded; only its judgement failed, saying where.
        assert row["status"] == "succeeded" and row["judge_status"] == "failed"
        assert row["task_app_score"] == pytest.approx(score_of(2))
        assert row["verifier_score"] is None and row["score"] is None  # reward_source verifier
        error = row["verifier_error"]
        assert error.startswith("replay diverged at the judge's call 1 of seed 2 repeat 0: ")
        assert "$.messages[1].content was " in error and "Be harsh." in error
        assert "task app's score is kept" in error
        assert (row["judge_divergences"], row["judge_cost_usd"]) == (1, 0)
        assert judge_marks(failed["job_id"]) == [ReplayMark.REFUSED]
        live = run(stack, f"{JOBS}/{job.id}/replay", {**harsher, "on_miss": "call"})
    (row,) = live["results"]
    assert row["judge_status"] == "done" and row["replayed_calls"] == 1
    assert (row["judge_live_calls"], row["judge_divergences"]) == (2, 2)
    assert row["judge_cost_usd"] == pytest.approx(by_seed(original)[2]["judge_cost_usd"])
    assert len(stack.fake.received) == 2  # the judge's two calls; the policy's replayed
    assert judge_marks(live["job_id"]) == [ReplayMark.LIVE] * 2
