import uuid

from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs.models import EvalJob, RolloutAttempt, SeedRun
from traces.models import LLMCall, Refusal
from traces.results.result_rows import job_results
from traces.results.selectors import attempt_access_get
from traces.results.totals import Spent, attempt_spent, job_spent
from traces.tokens import token_hash


def _attempt(job, seed, token="t"):
    seed_run = SeedRun.objects.create(job=job, seed=seed)
    return RolloutAttempt.objects.create(
        seed_run=seed_run,
        number=1,
        run_id=uuid.uuid4().hex,
        token_hash=token_hash(f"{token}{seed}"),
        started_at=timezone.now(),
    )


def _call(attempt, seq, **fields):
    return LLMCall.objects.create(attempt=attempt, seq=seq, started_at=timezone.now(), **fields)


def test_a_token_resolves_to_its_attempt_job_provider_and_budgets(db):
    owner = get_user_model().objects.create(username="u")
    job = EvalJob.objects.create(
        owner=owner, task_app_url="http://x", policy={"provider": "groq"}, max_tokens=99
    )
    attempt = _attempt(job, 1)
    access = attempt_access_get(token_hash=token_hash("t1"))
    assert access.attempt_id == attempt.id and access.job_id == job.id
    assert access.provider == "groq" and access.running
    assert access.max_tokens == 99 and access.max_cost_usd is None and access.has_budget
    assert attempt_access_get(token_hash=token_hash("other")) is None


def test_spent_totals_and_budget_refusals_are_per_job(db):
    owner = get_user_model().objects.create(username="u")
    job = EvalJob.objects.create(owner=owner, task_app_url="http://x")
    a, b = _attempt(job, 1), _attempt(job, 2)
    _call(a, 1, total_tokens=100, cost_usd=0.25)
    _call(b, 1, total_tokens=50, cost_usd=None, cost_unknown=True)
    _call(
        b, 2, total_tokens=0, cost_usd=0.0, http_status=429, error="budget_exceeded: spent",
        refusal=Refusal.BUDGET,
    )  # fmt: skip
    other = EvalJob.objects.create(owner=owner, task_app_url="http://x")
    _call(_attempt(other, 1, token="o"), 1, total_tokens=7, cost_usd=1.0)

    assert job_spent(job_id=job.id) == Spent(tokens=150, cost=0.25)
    summary, rows = job_results(job=job)
    assert [r["budget_exceeded"] for r in rows] == [False, True]
    assert (summary["budget_exceeded"], summary["seeds_refused_by_budget"]) == (True, 1)


def test_an_attempts_spending_leaves_out_refusals_and_retried_tries(db):
    owner = get_user_model().objects.create(username="u")
    attempt = _attempt(EvalJob.objects.create(owner=owner, task_app_url="http://x"), 1)
    _call(attempt, 1, total_tokens=100, cost_usd=0.25)
    _call(attempt, 2, total_tokens=7, cost_usd=1.0, error="upstream_error (502), tried again")
    _call(attempt, 3, total_tokens=9, cost_usd=1.0, refusal=Refusal.MAX_TOKENS)
    _call(attempt, 4, total_tokens=20, cost_usd=None, cost_unknown=True)
    assert attempt_spent(attempt_id=attempt.id) == Spent(tokens=120, cost=0.25)
    assert job_spent(job_id=attempt.seed_run.job_id) == Spent(tokens=136, cost=2.25)
