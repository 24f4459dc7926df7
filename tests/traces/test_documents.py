"""The per-seed trace document: its content, its order, its schema, and what it never shows."""

from __future__ import annotations

import hashlib
import json

import jsonschema
import pytest
from django.utils import timezone

from jobs.models import RolloutAttempt, SeedRun
from tests.support.trace_rows import TASK_APP_BEARER, TASK_APP_KEY, make_traced_job
from traces.models import LLMCall
from traces.redaction import job_redactor
from traces.zip.documents import (
    PRUNED_REQUEST,
    SCHEMA,
    document_bytes,
    seed_trace,
    seed_trace_document,
)

pytestmark = pytest.mark.django_db


def document_of(traced, seed: int) -> dict:
    seed_run = SeedRun.objects.get(job=traced.job, seed=seed)
    return seed_trace_document(
        job=traced.job, seed_run=seed_run, redactor=job_redactor(job=traced.job)
    )


def validate(document: dict, trace_schema: dict) -> None:
    jsonschema.Draft202012Validator(
        trace_schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(document)


def test_document_validates_against_the_published_schema(trace_schema):
    traced = make_traced_job(seeds=[3], calls_per_seed=3)
    document = document_of(traced, 3)
    validate(document, trace_schema)
    assert document["schema"] == SCHEMA == trace_schema["properties"]["schema"]["const"]


def test_document_holds_the_exchange_of_every_call(trace_schema):
    traced = make_traced_job(seeds=[5], calls_per_seed=3)
    doc = document_of(traced, 5)
    assert doc["job_id"] == traced.job.id and doc["seed"] == 5 and doc["status"] == "succeeded"
    assert doc["score"] == 0.25 and doc["outcome_score"] == 0.25
    assert [c["seq"] for c in doc["llm_calls"]] == [1, 2, 3]

    first, last = doc["llm_calls"][0], doc["llm_calls"][-1]
    assert first["request"]["messages"][1]["content"].startswith("Problem 5")
    assert first["request"]["tools"][0]["function"]["name"] == "calculator"
    assert first["request"]["tool_choice"] == "auto"
    assert first["request"]["params"]["temperature"] == 0.0
    assert first["request"]["params"]["top_logprobs"] == 2
    assert "messages" not in first["request"]["params"]
    # The model asked for a tool, then answered.
    assert first["response"]["finish_reason"] == "tool_calls"
    assert first["response"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert first["response"]["reasoning"].startswith("Seed 5, step 1")
    assert first["response"]["logprobs"]["content"][0]["token"] == "The"
    assert last["response"]["finish_reason"] == "stop"
    assert last["response"]["message"]["content"] == "The answer is 88."
    assert last["request"]["messages"][2]["tool_calls"][0]["id"] == "call_5_2"

    assert first["usage"] == {
        "prompt_tokens": 130, "completion_tokens": 30, "cached_tokens": 64,
        "reasoning_tokens": 12, "cache_write_tokens": None, "total_tokens": 160,
        "estimated": False, "unknown": False,
    }  # fmt: skip
    assert first["cost_usd"] == pytest.approx(0.0000405) and first["cost_unknown"] is False
    assert first["ttft_ms"] == 85.0 and first["latency_ms"] == 410.0 and first["status"] == "ok"
    assert doc["usage"]["total_tokens"] == 160 + 170 + 180
    assert doc["usage"]["num_llm_calls"] == 3
    assert doc["usage"]["cost_usd"] == pytest.approx(3 * 0.0000405)
    assert doc["task_app"]["metrics"]["outcome_reward"] == 0.25
    assert doc["task_app"]["details"]["answer"] == "85"
    assert doc["task_app"]["trace"]["events"] == [{"type": "step", "reward": 0.25}]
    assert doc["attempts"][0]["run_id"].startswith("run-")


def test_calls_of_every_attempt_come_in_attempt_then_call_order(trace_schema):
    traced = make_traced_job(seeds=[1], calls_per_seed=2)
    seed_run = SeedRun.objects.get(job=traced.job, seed=1)
    now = timezone.now()
    retry = RolloutAttempt.objects.create(
        seed_run=seed_run, number=2, run_id="run-retry", token_hash=hashlib.sha256(b"t2").hexdigest(),
        status="succeeded", started_at=now,
    )  # fmt: skip
    first = RolloutAttempt.objects.get(seed_run=seed_run, number=1)
    first.status, first.error, first.http_status = "failed", "task app answered 502", 502
    first.save()
    # Created out of order on purpose.
    for seq in (2, 1):
        LLMCall.objects.create(attempt=retry, seq=seq, started_at=now, request={"messages": []})
    doc = document_of(traced, 1)
    validate(doc, trace_schema)
    assert [(c["attempt"], c["seq"]) for c in doc["llm_calls"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert [a["number"] for a in doc["attempts"]] == [1, 2]
    assert doc["attempts"][0]["error"] == "task app answered 502"
    assert "token_hash" not in json.dumps(doc)


def test_error_calls_pruned_calls_and_unknown_prices_fit_the_schema(trace_schema):
    traced = make_traced_job(seeds=[2], calls_per_seed=2)
    attempt = RolloutAttempt.objects.get(seed_run__job=traced.job)
    LLMCall.objects.filter(attempt=attempt, seq=1).update(request=PRUNED_REQUEST, response=None)
    LLMCall.objects.filter(attempt=attempt, seq=2).update(
        http_status=429, error="rate limited", response={"error": {"message": "slow down"}},
        cost_usd=None, cost_unknown=True,
    )  # fmt: skip
    doc = document_of(traced, 2)
    validate(doc, trace_schema)
    pruned, failed = doc["llm_calls"]
    assert pruned["content_pruned"] is True and pruned["request"] is None
    assert failed["status"] == "error" and failed["response"]["body"]["error"]["message"]
    assert doc["usage"]["cost_usd"] is None and doc["usage"]["cost_unknown"] is True


def test_secrets_are_scrubbed_everywhere_in_the_document(provider_key):
    traced = make_traced_job(seeds=[7], calls_per_seed=2)
    attempt = RolloutAttempt.objects.get(seed_run__job=traced.job)
    LLMCall.objects.filter(attempt=attempt, seq=1).update(
        request={"messages": [{"role": "user", "content": f"my key is {provider_key}"}],
                 "api_key": provider_key}
    )  # fmt: skip
    text = document_bytes(document_of(traced, 7)).decode()
    for secret in [TASK_APP_KEY, TASK_APP_BEARER, provider_key, *traced.tokens]:
        assert secret not in text
    assert "/api/interceptor/v1/<redacted>/chat/completions" in text
    doc = json.loads(text)
    assert doc["task_app"]["trace"]["headers"] == {
        "X-API-Key": "<redacted>", "Authorization": "<redacted>"
    }  # fmt: skip
    assert doc["llm_calls"][0]["request"]["params"]["api_key"] == "<redacted>"


def test_result_row_is_the_one_results_serves(client_alice):
    traced = make_traced_job(username="alice", seeds=[0, 1], calls_per_seed=2)
    results = client_alice.get(f"/api/eval/jobs/{traced.job.id}/results").json()["results"]
    seed_run = SeedRun.objects.get(job=traced.job, seed=1)
    row, _ = seed_trace(job=traced.job, seed_run=seed_run, redactor=job_redactor(job=traced.job))
    served = next(r for r in results if r["seed"] == 1)
    assert {k: row[k] for k in ("tokens", "cost_usd", "num_llm_calls", "score")} == {
        k: served[k] for k in ("tokens", "cost_usd", "num_llm_calls", "score")
    }
