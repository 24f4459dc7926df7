"""POST /api/eval/jobs/{id}/judge: the same rollouts judged again, as a new job."""

from __future__ import annotations

import pytest

from evalhub.fakeprovider import JUDGE_USAGE, judge_score
from jobs.models import EvalJob
from tests.support.servers import serve_asgi
from tests.support.task_app import score_of, task_app_create
from tests.verifier.test_judge import job_body, job_run, job_wait, judge_calls
from traces.models import LLMCall

pytestmark = pytest.mark.worker

# o4-mini, USD per million tokens.
O4_INPUT, O4_OUTPUT = 1.10, 4.40


def test_rejudge_makes_a_new_result_set_without_running_rollouts_again(stack):
    app, state = task_app_create()
    first = {"enabled": True, "reward_source": "verifier"}
    with serve_asgi(app) as url:
        stack.worker()
        job, before = job_run(stack, url, first, seeds=[0, 1, 2])
        rollouts = len(state.requests)
        response = stack.post(
            f"/api/eval/jobs/{job.id}/judge",
            {"verifier_config": {"reward_source": "fused", "weight_env": 1, "weight_outcome": 1,
                                 "backend_model": "o4-mini", "rubric": "Be harsh."}},
        )  # fmt: skip
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["config"]["judged_from"] == job.id
        again = job_wait(body["job_id"])
        results = stack.get(f"/api/eval/jobs/{again.id}/results").json()
    assert again.status == "completed", again.error
    assert len(state.requests) == rollouts  # no rollout ran again
    calls = judge_calls(again)
    for row in results["results"]:
        (call,) = calls[row["seed"]]
        verdict = judge_score(call.request)
        assert "Be harsh." in call.request["messages"][1]["content"]
        assert f"seed {row['seed']}" in call.request["messages"][1]["content"]
        assert call.model_requested == "o4-mini"
        assert row["verifier_score"] == pytest.approx(verdict)
        assert row["score"] == pytest.approx((score_of(row["seed"]) + verdict) / 2)
        assert row["judge_tokens"] == sum(JUDGE_USAGE.values())
        expected = (900 * O4_INPUT + 60 * O4_OUTPUT) / 1e6
        assert row["judge_cost_usd"] == pytest.approx(expected)
        assert row["tokens"] == 0  # the new job spent nothing on the policy
    # The first job's result set is untouched.
    after = stack.get(f"/api/eval/jobs/{job.id}/results").json()
    assert after["results"] == before["results"]
    assert LLMCall.objects.filter(attempt__seed_run__job=job, kind="judge").count() == 3


def test_rejudge_refuses_what_it_cannot_do(stack, make_client):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        response = stack.post("/api/eval/jobs", job_body(url, {"enabled": True}, seeds=[1]))
        job_id = response.json()["job_id"]
        # No worker yet: the job has not ended.
        busy = stack.post(f"/api/eval/jobs/{job_id}/judge", {"verifier_config": {}})
        assert busy.status_code == 409 and busy.json()["error"] == "not_judgeable"
        bad = stack.post(f"/api/eval/jobs/{job_id}/judge", {"verifier_config": {"concurrency": 0}})
        assert bad.status_code == 400
        assert "concurrency" in bad.json()["detail"]
        assert "verifier_config" in bad.json()["fields"]
        missing = stack.post(f"/api/eval/jobs/{job_id}/judge", {})
        assert missing.status_code == 400 and "verifier_config" in missing.json()["fields"]
    bob = make_client("bob")
    assert bob.post(f"/api/eval/jobs/{job_id}/judge", {}, format="json").status_code == 404
    assert EvalJob.objects.filter(judged_from_id=job_id).count() == 0
