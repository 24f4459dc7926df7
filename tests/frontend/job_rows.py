"""Rows of a job as the workers and the interceptor write them: a seed run claimed, one rollout
attempt, the LLM calls of a small tool-using conversation, the task app's metrics and trace.

The dashboard only reads these rows, so its tests write them directly. A test that needs a job
to run end to end can instead post it through the API to a real task app with a worker
(`worker_factory`): the pages and the assertions stay the same.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from django.utils import timezone

from jobs import services
from jobs.models import EvalJob, JobStatus, RolloutAttempt, SeedRun, SeedStatus
from traces.models import LLMCall

SYSTEM = "You are a careful calculator agent. Use the multiply tool."
REASONING = "The user wants a product; I should call the multiply tool rather than guess."
TOOL_ARGS = {"a": 17, "b": 23}
TASK_APP_KEY = "task-app-key-never-shown-5e1f"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            },
        },
    }
]


def job_make(*, owner, seeds: list[int], **spec) -> EvalJob:
    """A job as POST /api/eval/jobs creates it: pending, one pending seed run per seed."""
    values = {
        "task_app_url": "http://127.0.0.1:9/",
        "task_app_api_key": TASK_APP_KEY,
        "app_id": "calculator",
        "env_name": "calc",
        "policy": {"model": "gpt-4o-mini", "provider": "openai", "temperature": 0.0},
        **spec,
    }
    return services.job_create(owner=owner, spec=services.JobSpec(seeds=seeds, **values))


def job_start(*, job: EvalJob) -> None:
    job.status = JobStatus.RUNNING
    job.started_at = timezone.now()
    job.save(update_fields=["status", "started_at"])


def job_finish(*, job: EvalJob, status: str = JobStatus.COMPLETED) -> None:
    job.status = status
    job.completed_at = timezone.now()
    job.save(update_fields=["status", "completed_at"])


def _assistant_tool_call(seed: int) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "reasoning_content": REASONING,
        "tool_calls": [
            {
                "id": f"call_{seed}",
                "type": "function",
                "function": {"name": "multiply", "arguments": json.dumps(TOOL_ARGS)},
            }
        ],
    }


def _completion(message: dict, finish: str, prompt: int, completion: int) -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def attempt_record(
    *, seed_run: SeedRun, number: int = 1, error: str | None = None, cost: float | None = 0.0002
) -> RolloutAttempt:
    """One attempt with two LLM calls: a tool call (with reasoning), then the final answer."""
    now = timezone.now()
    attempt = RolloutAttempt.objects.create(
        seed_run=seed_run,
        number=number,
        run_id=f"run-{uuid.uuid4().hex}",
        token_hash=uuid.uuid4().hex + uuid.uuid4().hex,
        status="failed" if error else "succeeded",
        http_status=500 if error else 200,
        error=error,
        started_at=now - timedelta(seconds=2),
        finished_at=now,
        latency_ms=2000.0,
    )
    seed = seed_run.seed
    history = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Seed {seed}: what is 17 * 23?"},
    ]
    first = _assistant_tool_call(seed)
    second_history = [
        *history,
        first,
        {"role": "tool", "tool_call_id": f"call_{seed}", "content": "391"},
    ]
    exchanges = [
        (history, _completion(first, "tool_calls", 120, 30)),
        (
            second_history,
            _completion({"role": "assistant", "content": "17 * 23 = 391"}, "stop", 170, 12),
        ),
    ]
    for seq, (messages, response) in enumerate(exchanges, start=1):
        usage = response["usage"]
        LLMCall.objects.create(
            attempt=attempt,
            seq=seq,
            model_requested="gpt-4o-mini",
            model_answered=response["model"],
            request={"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS},
            response=response,
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"],
            reasoning_tokens=8 if seq == 1 else None,
            cost_usd=cost,
            cost_unknown=cost is None,
            http_status=200,
            started_at=now - timedelta(seconds=2 - seq * 0.5),
            ttft_ms=180.0 + seq,
            latency_ms=420.0 + seq,
        )
    return attempt


def seed_complete(
    *, seed_run: SeedRun, score: float | None = 1.0, error: str | None = None
) -> SeedRun:
    """Finish a seed as a worker does: its attempt, LLM calls, metrics, trace and result."""
    seed_run.status = SeedStatus.RUNNING
    seed_run.started_at = timezone.now()
    seed_run.attempts = 1
    seed_run.save(update_fields=["status", "started_at", "attempts"])
    attempt_record(seed_run=seed_run, error=error)
    seed_run.status = SeedStatus.FAILED if error else SeedStatus.SUCCEEDED
    seed_run.score = None if error else score
    seed_run.outcome_score = seed_run.score
    seed_run.error = error
    seed_run.latency_ms = 2000.0 + seed_run.seed
    seed_run.metrics = None if error else {"outcome_reward": score, "num_steps": 2}
    seed_run.task_trace = (
        None if error else {"steps": [{"action": "multiply", "observation": "391"}]}
    )
    seed_run.finished_at = timezone.now()
    seed_run.save()
    return seed_run


def job_run_all(*, job: EvalJob, scores: dict[int, float] | None = None) -> EvalJob:
    """Start the job, finish every seed (score 1.0 unless given), complete the job."""
    job_start(job=job)
    for seed_run in SeedRun.objects.filter(job=job).order_by("seed"):
        seed_complete(seed_run=seed_run, score=(scores or {}).get(seed_run.seed, 1.0))
    job_finish(job=job)
    job.refresh_from_db()
    return job


JUDGE_MODEL = "gpt-4o-2024-08-06"


def judge_record(
    *, seed_run: SeedRun, verdict: float, justification: str, cost: float = 0.0005
) -> LLMCall:
    """The verifier's judgement of a finished seed as the runner writes it: a judge call on the
    seed's last attempt (`kind: "judge"`), then the verdict on the seed run."""
    attempt = RolloutAttempt.objects.filter(seed_run=seed_run).order_by("-number").first()
    call = LLMCall.objects.create(
        attempt=attempt,
        seq=100,
        kind="judge",
        model_requested="gpt-4o",
        model_answered=JUDGE_MODEL,
        request={"model": "gpt-4o", "messages": [{"role": "user", "content": "Judge this."}]},
        response=_completion({"role": "assistant", "content": justification}, "stop", 300, 40),
        prompt_tokens=300,
        completion_tokens=40,
        total_tokens=340,
        cost_usd=cost,
        http_status=200,
        started_at=timezone.now(),
        latency_ms=700.0,
    )
    seed_run.judge_status = "done"
    seed_run.verifier_score = verdict
    seed_run.verifier_justification = justification
    seed_run.save(update_fields=["judge_status", "verifier_score", "verifier_justification"])
    return call
