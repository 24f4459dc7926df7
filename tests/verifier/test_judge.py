"""The verifier through the real worker and interceptor, with the fake provider as the judge."""

from __future__ import annotations

import pytest

from evalhub.fakeprovider import JUDGE_USAGE, judge_score
from jobs.models import EvalJob, SeedRun
from tests.support.jobs import job_wait
from tests.support.servers import serve_asgi
from tests.support.task_app import score_of, task_app_create
from traces.models import LLMCall

pytestmark = pytest.mark.worker

# OpenAI's gpt-4o-mini prices, USD per million tokens; the fake's default policy usage.
INPUT, OUTPUT = 0.15, 0.60
POLICY_USAGE = {"prompt_tokens": 1200, "completion_tokens": 300}


def cost(u: dict[str, int]) -> float:
    return (u["prompt_tokens"] * INPUT + u["completion_tokens"] * OUTPUT) / 1e6


def job_body(url: str, verifier: dict, seeds=(0, 1, 2), **overrides) -> dict:
    return {
        "task_app_url": url,
        "env_name": "demo",
        "seeds": list(seeds),
        "policy": {"model": "gpt-4o-mini", "provider": "openai"},
        "env_config": {"call_llm": True},
        "max_concurrent": 2,
        "timeout": 30,
        "verifier_config": verifier,
        **overrides,
    }


def job_run(stack, url: str, verifier: dict, **overrides) -> tuple[EvalJob, dict]:
    response = stack.post("/api/eval/jobs", job_body(url, verifier, **overrides))
    assert response.status_code == 201, response.text
    job_id = response.json()["job_id"]
    job = job_wait(job_id, timeout=90)
    results = stack.get(f"/api/eval/jobs/{job_id}/results").json()
    return job, results


def judge_calls(job: EvalJob) -> dict[int, list[LLMCall]]:
    calls: dict[int, list[LLMCall]] = {}
    for call in LLMCall.objects.filter(attempt__seed_run__job=job, kind="judge").order_by("id"):
        calls.setdefault(call.attempt.seed_run.seed, []).append(call)
    return calls


@pytest.mark.parametrize(
    ("source", "weights"),
    [("verifier", {}), ("fused", {"weight_env": 1.0, "weight_event": 1.0, "weight_outcome": 2.0})],
)
def test_rewards_equal_the_formula_and_judge_spend_is_apart(stack, source, weights):
    app, _ = task_app_create()
    verifier = {"enabled": True, "reward_source": source, "backend_model": "gpt-4o-mini",
                "backend_provider": "openai", **weights}  # fmt: skip
    with serve_asgi(app) as url:
        stack.worker()
        job, results = job_run(stack, url, verifier)
    assert job.status == "completed", job.error
    calls = judge_calls(job)
    rows = {r["seed"]: r for r in results["results"]}
    for seed, row in rows.items():
        (call,) = calls[seed]
        verdict = judge_score(call.request)
        assert row["verifier_score"] == pytest.approx(verdict)
        assert row["task_app_score"] == pytest.approx(score_of(seed))
        expected = verdict if source == "verifier" else (score_of(seed) + 3 * verdict) / 4
        assert row["score"] == pytest.approx(expected)
        assert row["reward"] == pytest.approx(expected)
        assert row["verifier_justification"] == f"Fake verdict {verdict:.2f}."
        assert row["judge_status"] == "done" and row["verifier_error"] is None
        # The policy's spend is the policy's; the judge's is beside it, exact.
        assert row["tokens"] == sum(POLICY_USAGE.values())
        assert row["cost_usd"] == pytest.approx(cost(POLICY_USAGE))
        assert row["judge_tokens"] == sum(JUDGE_USAGE.values())
        assert row["judge_cost_usd"] == pytest.approx(cost(JUDGE_USAGE))
        # The judge was shown the task, the rubric and the policy's conversation.
        shown = call.request["messages"][1]["content"]
        assert f"seed {seed}" in shown and "You said:" in shown and "## Rubric" in shown
        assert call.provider == "openai" and call.model_requested == "gpt-4o-mini"
    summary = results["summary"]
    assert summary["total_tokens"] == 3 * sum(POLICY_USAGE.values())
    assert summary["total_cost_usd"] == pytest.approx(3 * cost(POLICY_USAGE))
    assert summary["judge_total_tokens"] == 3 * sum(JUDGE_USAGE.values())
    assert summary["judge_total_cost_usd"] == pytest.approx(3 * cost(JUDGE_USAGE))
    assert summary["num_judged"] == 3 and summary["num_verifier_errors"] == 0
    assert summary["mean_score"] == pytest.approx(sum(r["score"] for r in rows.values()) / 3)
    # No provider key reached the judge's record.
    assert all(stack.base not in str(c.request) for cs in calls.values() for c in cs)


def test_task_app_source_keeps_the_task_apps_score_and_still_judges(stack):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        stack.worker()
        job, results = job_run(stack, url, {"enabled": True, "reward_source": "task_app"})
    assert job.status == "completed", job.error
    for row in results["results"]:
        assert row["score"] == pytest.approx(score_of(row["seed"]))
        assert row["verifier_score"] == pytest.approx(
            judge_score(judge_calls(job)[row["seed"]][0].request)
        )


def test_disabled_verifier_makes_no_judge_call(stack):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        stack.worker()
        job, results = job_run(stack, url, {"enabled": False, "reward_source": "verifier"})
    assert job.status == "completed"
    assert not LLMCall.objects.filter(kind="judge").exists()
    # The task app's own verifier_score (details.verifier_score) is kept as before.
    for row in results["results"]:
        assert row["verifier_score"] == pytest.approx(1 - score_of(row["seed"]))
        assert row["judge_status"] is None and row["judge_tokens"] == 0


def test_malformed_answer_is_retried_once_then_an_error_never_zero(stack):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        stack.worker()
        bad, bad_results = job_run(
            stack, url, {"enabled": True, "reward_source": "verifier",
                         "rubric": "fake-judge:malformed"}, seeds=[0, 1],
        )  # fmt: skip
        once, once_results = job_run(
            stack, url, {"enabled": True, "reward_source": "verifier",
                         "rubric": "fake-judge:malformed-once"}, seeds=[3],
        )  # fmt: skip
    assert bad.status == "completed"
    for row in bad_results["results"]:
        assert row["judge_status"] == "failed"
        assert row["verifier_score"] is None and row["score"] is None
        assert "malformed judge answer, twice" in row["verifier_error"]
        assert row["task_app_score"] == pytest.approx(score_of(row["seed"]))
        assert len(judge_calls(bad)[row["seed"]]) == 2  # the answer, and the one retry
        assert row["judge_tokens"] == 2 * sum(JUDGE_USAGE.values())
    assert bad_results["summary"]["num_verifier_errors"] == 2
    # No sample has a score: none is made up (the mean that counts them 0 says how many).
    assert bad_results["summary"]["mean_score_scored"] is None
    assert bad_results["summary"]["num_scored"] == 0
    (row,) = once_results["results"]
    first, retry = judge_calls(once)[3]
    assert row["judge_status"] == "done"
    assert row["verifier_score"] == pytest.approx(judge_score(retry.request))
    assert "Your answer was not valid" in retry.request["messages"][-1]["content"]


def test_judge_provider_down_keeps_the_task_app_score_and_says_so(stack):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        stack.worker()
        job, results = job_run(
            stack, url, {"enabled": True, "reward_source": "fused", "weight_outcome": 1.0,
                         "backend_provider": "deadjudge"}, seeds=[4, 5],
        )  # fmt: skip
    assert job.status == "completed"
    for row in results["results"]:
        assert row["task_app_score"] == pytest.approx(score_of(row["seed"]))
        assert row["status"] == "succeeded" and row["judge_status"] == "failed"
        assert row["verifier_score"] is None and row["score"] is None
        assert "judge provider 'deadjudge' unavailable: HTTP 502" in row["verifier_error"]
        assert "task app's score is kept" in row["verifier_error"]
        # The policy's calls are untouched; the refused judge call cost nothing.
        assert row["tokens"] == sum(POLICY_USAGE.values()) and row["judge_tokens"] == 0
    seed = SeedRun.objects.get(job=job, seed=4)
    assert seed.task_app_score == pytest.approx(score_of(4))


def test_a_job_stored_with_weights_that_overflow_still_ends_and_reads(stack):
    """Weights of 1e308 (accepted before they were bounded) summed to infinity and made every
    fused reward NaN: the judge's summary crashed and the job ran for ever. Stored so, such a
    job now ends with finite rewards, and every read of it answers."""
    from django.contrib.auth import get_user_model

    from jobs import services

    app, _ = task_app_create()
    verifier = {"enabled": True, "reward_source": "fused", "backend_provider": "openai",
                "weight_env": 1e308, "weight_event": 1e308, "weight_outcome": 1e308}  # fmt: skip
    with serve_asgi(app) as url:
        stack.worker()
        body = {**job_body(url, verifier), "verifier_config": verifier}
        spec = services.JobSpec(**body)
        owner = get_user_model().objects.get(username="alice")
        job = job_wait(services.job_create(owner=owner, spec=spec).id)
    assert job.status == "completed", job.error
    rows = stack.get(f"/api/eval/jobs/{job.id}/results").json()["results"]
    for row in rows:
        expected = (score_of(row["seed"]) + 2 * row["verifier_score"]) / 3
        assert row["score"] == pytest.approx(expected)
    for path in (f"/api/eval/jobs/{job.id}", "/api/eval/jobs", f"/api/eval/jobs/{job.id}/seeds/0"):
        assert stack.get(path).status_code == 200, path
