"""Jobs with finished seeds, rollout attempts and LLM calls, written straight through the ORM,
with the content real task apps and providers produce (tool calls, reasoning, logprobs, usage,
cost) and with the secrets a careless task app echoes back."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from evalhub import crypto
from jobs.models import EvalJob, RolloutAttempt, SeedRun
from traces.models import LLMCall

TASK_APP_KEY = "task-app-key-7c1f0e9a2b4d"
TASK_APP_BEARER = "sk-task-app-dummy-5e8d2a71"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


@dataclass
class TracedJob:
    job: EvalJob
    tokens: list[str] = field(default_factory=list)  # raw interceptor tokens, one per attempt
    inference_urls: list[str] = field(default_factory=list)


def _request(seed: int, seq: int, inference_url: str) -> dict:
    messages = [
        {"role": "system", "content": "You solve arithmetic. Use the calculator tool."},
        {"role": "user", "content": f"Problem {seed}: what is {seed} * 17 + {seq}?"},
    ]
    if seq > 1:
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{seed}_{seq - 1}",
                        "type": "function",
                        "function": {
                            "name": "calculator",
                            "arguments": f'{{"expression": "{seed} * 17 + {seq - 1}"}}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{seed}_{seq - 1}", "content": str(seed * 17)},
        ]
    return {
        "model": "gpt-4o-mini",
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0.0,
        "max_completion_tokens": 256,
        "logprobs": True,
        "top_logprobs": 2,
        "stream": False,
        # A task app that copies its own headers into the body: the interceptor records it as is.
        "extra_headers": {"Authorization": f"Bearer {TASK_APP_BEARER}", "X-API-Key": TASK_APP_KEY},
        "metadata": {"inference_url": inference_url},
    }


def _response(seed: int, seq: int, last: bool) -> dict:
    if last:
        message = {"role": "assistant", "content": f"The answer is {seed * 17 + seq}."}
        finish = "stop"
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{seed}_{seq}",
                    "type": "function",
                    "function": {
                        "name": "calculator",
                        "arguments": f'{{"expression": "{seed} * 17 + {seq}"}}',
                    },
                }
            ],
        }
        finish = "tool_calls"
    message["reasoning_content"] = f"Seed {seed}, step {seq}: multiply first, then add."
    return {
        "id": f"chatcmpl-{seed}-{seq}",
        "object": "chat.completion",
        "created": 1_763_700_000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish,
                "logprobs": {
                    "content": [
                        {
                            "token": "The",
                            "logprob": -0.01,
                            "bytes": [84, 104, 101],
                            "top_logprobs": [{"token": "The", "logprob": -0.01, "bytes": None}],
                        }
                    ]
                },
            }
        ],
        "usage": {
            "prompt_tokens": 120 + 10 * seq,
            "completion_tokens": 30,
            "total_tokens": 150 + 10 * seq,
            "prompt_tokens_details": {"cached_tokens": 64},
            "completion_tokens_details": {"reasoning_tokens": 12},
        },
    }


def make_traced_job(
    *,
    username: str = "alice",
    seeds: list[int] = (0, 1, 2),
    calls_per_seed: int = 3,
    status: str = "completed",
    seed_status: str = "succeeded",
    public_url: str = "http://127.0.0.1:8000",
) -> TracedJob:
    user, _ = get_user_model().objects.get_or_create(username=username)
    now = timezone.now()
    terminal = status in ("completed", "failed", "cancelled")
    job = EvalJob.objects.create(
        owner=user,
        status=status,
        task_app_url="http://127.0.0.1:9/",
        task_app_api_key_encrypted=crypto.encrypt(TASK_APP_KEY),
        app_id="math",
        env_name="math",
        policy={"model": "gpt-4o-mini", "provider": "openai", "temperature": 0.0},
        env_config={"split": "test"},
        num_seeds=len(seeds),
        num_samples=len(seeds),
        started_at=now - timedelta(minutes=5),
        completed_at=now if terminal else None,
    )
    traced = TracedJob(job=job)
    for seed in seeds:
        token = secrets.token_urlsafe(24)
        inference_url = f"{public_url}/api/interceptor/v1/{token}"
        traced.tokens.append(token)
        traced.inference_urls.append(inference_url)
        score = (seed % 4) / 4
        finished = seed_status in ("succeeded", "failed")
        seed_run = SeedRun.objects.create(
            job=job,
            seed=seed,
            status=seed_status,
            attempts=1,
            score=score if finished else None,
            reward_mean=score if finished else None,
            outcome_score=score if finished else None,
            latency_ms=1234.5 if finished else None,
            metrics={
                "outcome_reward": score,
                "reward_mean": score,
                "num_steps": calls_per_seed,
                "details": {
                    "answer": str(seed * 17),
                    "echo": f"called {inference_url}/chat/completions with key {TASK_APP_KEY}",
                },
            }
            if finished
            else None,
            task_trace={
                "session_id": f"s-{seed}",
                "inference_url": inference_url,
                "headers": {"X-API-Key": TASK_APP_KEY, "Authorization": f"Bearer {TASK_APP_KEY}"},
                "events": [{"type": "step", "reward": score}],
            }
            if finished
            else None,
            started_at=now - timedelta(minutes=4),
            finished_at=now - timedelta(minutes=1) if finished else None,
        )
        attempt = RolloutAttempt.objects.create(
            seed_run=seed_run,
            number=1,
            run_id=f"run-{job.id[-8:]}-{seed}",
            token_hash=hashlib.sha256(token.encode()).hexdigest(),
            status="succeeded" if finished else "running",
            http_status=200 if finished else None,
            started_at=now - timedelta(minutes=4),
            finished_at=now - timedelta(minutes=1) if finished else None,
            latency_ms=1200.0 if finished else None,
        )
        LLMCall.objects.bulk_create(
            LLMCall(
                attempt=attempt,
                seq=seq,
                provider="openai",
                model_requested="gpt-4o-mini",
                model_answered="gpt-4o-mini-2024-07-18",
                request=_request(seed, seq, inference_url),
                response=_response(seed, seq, seq == calls_per_seed),
                prompt_tokens=120 + 10 * seq,
                completion_tokens=30,
                cached_tokens=64,
                reasoning_tokens=12,
                total_tokens=150 + 10 * seq,
                cost_usd=0.0000405,
                http_status=200,
                started_at=now - timedelta(minutes=4) + timedelta(seconds=seq),
                ttft_ms=85.0,
                latency_ms=410.0,
            )
            for seq in range(1, calls_per_seed + 1)
        )
    return traced
