from __future__ import annotations

import pytest
from django.utils import timezone

from tests.support.migrations import migrate_latest, migrate_to


@pytest.mark.django_db(transaction=True)
def test_refused_calls_of_before_say_so_in_their_refusal():
    apps = migrate_to("traces", "0004_trace_member")
    try:
        User = apps.get_model("auth", "User")
        EvalJob, SeedRun = apps.get_model("jobs", "EvalJob"), apps.get_model("jobs", "SeedRun")
        attempt = apps.get_model("jobs", "RolloutAttempt").objects.create(
            seed_run=SeedRun.objects.create(
                job=EvalJob.objects.create(
                    owner=User.objects.create(username="u"), task_app_url="x"
                ),
                seed=1,
            ),
            number=1, run_id="r", token_hash="h", started_at=timezone.now(),
        )  # fmt: skip
        errors = {
            "budget_exceeded: The job's budget is spent: 10 of max_tokens 5.": 429,
            "rollout_limit_exceeded: This rollout reached its limit max_tokens: 9 tokens of 5.": 429,
            "rollout_limit_exceeded: This rollout reached its limit max_llm_calls: 3 calls of 3.": 429,
            "upstream_error: budget_exceeded: the provider's own words": 429,
            "budget_exceeded: not ours, not a 429": 500,
            None: 200,
        }
        LLMCall = apps.get_model("traces", "LLMCall")
        for seq, (error, status) in enumerate(errors.items(), start=1):
            LLMCall.objects.create(
                attempt=attempt, seq=seq, error=error, http_status=status, started_at=timezone.now()
            )

        apps = migrate_to("traces", "0005_llmcall_refusal")
        LLMCall = apps.get_model("traces", "LLMCall")
        refusals = list(LLMCall.objects.order_by("seq").values_list("refusal", flat=True))
        assert refusals == ["budget_exceeded", "max_tokens", "max_llm_calls", "", "", ""]
    finally:
        migrate_latest()
