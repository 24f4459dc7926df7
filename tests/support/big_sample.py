"""A finished sample that made thousands of LLM calls, written straight through the ORM in bulk:
one seed, one attempt, `calls` calls of about `body_bytes` each (request and answer), an agent
that keeps only its last step in its history (each request a short conversation of its own, as
agents that trim their context send). For the tests and the benchmark of big samples."""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import timedelta

from django.utils import timezone

from evalhub import crypto
from jobs.models import EvalJob, RolloutAttempt, SeedRun
from traces.models import LLMCall

SYSTEM = "You are an agent exploring a maze. Call the move tool until you find the exit."
BATCH = 1000


def _request(seq: int, padding: str) -> dict:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Step {seq}. What you see: {padding}"},
    ]
    if seq > 1:
        call = {"id": f"call_{seq - 1}", "type": "function",
                "function": {"name": "move", "arguments": json.dumps({"step": seq - 1})}}  # fmt: skip
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{seq - 1}", "content": f"moved {seq - 1}"},
        ]
    return {"model": "gpt-4o-mini", "messages": messages}


def _response(seq: int, padding: str) -> dict:
    call = {"id": f"call_{seq}", "type": "function",
            "function": {"name": "move", "arguments": json.dumps({"step": seq})}}  # fmt: skip
    message = {"role": "assistant", "content": f"Thinking about step {seq}: {padding}",
               "tool_calls": [call]}  # fmt: skip
    return {
        "id": f"chatcmpl-{seq}",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 400, "completion_tokens": 120, "total_tokens": 520},
    }


def big_sample_make(*, owner, calls: int, body_bytes: int = 2048) -> SeedRun:
    """A completed job of one seed (0) whose one attempt made `calls` LLM calls."""
    now = timezone.now()
    job = EvalJob.objects.create(
        owner=owner, status="completed", task_app_url="http://127.0.0.1:9/",
        task_app_api_key_encrypted=crypto.encrypt("task-app-key-big-sample-1f3a"),
        policy={"model": "gpt-4o-mini"}, num_seeds=1, num_samples=1,
        started_at=now - timedelta(hours=1), completed_at=now,
    )  # fmt: skip
    seed_run = SeedRun.objects.create(
        job=job, seed=0, status="succeeded", attempts=1, score=1.0, outcome_score=1.0,
        latency_ms=3_600_000.0, metrics={"outcome_reward": 1.0}, started_at=job.started_at,
        finished_at=now,
    )  # fmt: skip
    attempt = RolloutAttempt.objects.create(
        seed_run=seed_run, number=1, run_id=f"run-{secrets.token_hex(4)}",
        token_hash=hashlib.sha256(secrets.token_bytes(16)).hexdigest(), status="succeeded",
        http_status=200, started_at=job.started_at, finished_at=now, latency_ms=3_600_000.0,
    )  # fmt: skip
    # About two thirds of a call's bytes in its request, a third in its answer.
    ask, say = "x" * (body_bytes * 2 // 3 - 300), "y" * (body_bytes // 3 - 200)
    for start in range(1, calls + 1, BATCH):
        LLMCall.objects.bulk_create(
            LLMCall(
                attempt=attempt, seq=seq, model_requested="gpt-4o-mini",
                model_answered="gpt-4o-mini-2024-07-18", request=_request(seq, ask),
                response=_response(seq, say), prompt_tokens=400, completion_tokens=120,
                total_tokens=520, cost_usd=0.00013, http_status=200,
                started_at=job.started_at + timedelta(milliseconds=500 * seq), latency_ms=400.0,
            )
            for seq in range(start, min(start + BATCH, calls + 1))
        )  # fmt: skip
    return seed_run
