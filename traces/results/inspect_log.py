"""A job as an Inspect AI eval log (the `.json` log format `inspect_ai.log.read_eval_log` reads
and `inspect view` shows), written from the rows with our own code: inspect_ai is not a
dependency of the server. docs/observability.md says how to open one.

One sample per (seed, repeat): id the seed, epoch the repeat + 1; its messages are the
rollout's conversation (`traces.calls.conversation.transcript`, tool calls and results
included) of the attempt that made the result; its scores the task app's (`task_app`) and,
with a verifier, the judge's (`judge`) and the reward combining them (`reward`); its usage per
model (`traces.results.totals`); a failed sample's error. Every value passes through the job's
redactor. The log is streamed a sample at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from jobs.models import EvalJob, JobStatus, SeedRun, SeedStatus
from traces.calls.conversation import transcript
from traces.models import CallKind
from traces.redaction import Redactor, job_redactor
from traces.results import result_rows, totals
from traces.zip.documents import trace_of, trace_rows

PAGE_SIZE = 100
_STATUS = {JobStatus.COMPLETED: "success", JobStatus.CANCELLED: "cancelled",
           JobStatus.FAILED: "error"}  # fmt: skip
_STOP = {"stop": "stop", "length": "max_tokens", "tool_calls": "tool_calls",
         "content_filter": "content_filter"}  # fmt: skip


def _dumps(value: Any) -> bytes:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False).encode()


def _iso(value: datetime | None) -> str:
    return (value or datetime.now(UTC)).isoformat()


def model_usage(usage: totals.Usage) -> dict[str, Any]:
    """A `Usage` as Inspect's ModelUsage."""
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "input_tokens_cache_read": usage.cached_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "total_cost": usage.cost_usd,
    }


def inspect_log_filename(job: EvalJob) -> str:
    created = job.created_at.strftime("%Y-%m-%dT%H-%M-%S")
    return f"{created}_{_task(job)}_{job.id}.json"


def _task(job: EvalJob) -> str:
    return job.env_name or job.task_app_kind or "evalhub"


def _model(job: EvalJob) -> str:
    policy = job.policy if isinstance(job.policy, dict) else {}
    model = str(policy.get("model") or "unknown")
    provider = policy.get("provider")
    return f"{provider}/{model}" if provider and "/" not in model else model


def inspect_log_chunks(*, job: EvalJob) -> Iterator[bytes]:
    """The log as bytes, in pieces: its header, then each sample."""
    redactor = job_redactor(job=job)
    header = redactor.value(_header(job))
    yield _dumps(header)[:-1] + b', "samples": ['
    ids = list(
        SeedRun.objects.filter(job=job).order_by("seed", "repeat").values_list("id", flat=True)
    )
    first = True
    for seed_run, attempts in trace_rows(job=job, seed_run_ids=ids, chunk_size=PAGE_SIZE):
        sample = _sample(job, seed_run, attempts, redactor)
        yield (b"" if first else b", ") + _dumps(sample)
        first = False
    yield b"]}"


def _header(job: EvalJob) -> dict[str, Any]:
    summary = result_rows.job_summary(job)
    # Inspect reads usage per model: the policy's calls and the judge's on one model together.
    per_model: dict[str, list[totals.Usage]] = {}
    for (_kind, model), usage in totals.job_usage_by_model(job=job).items():
        per_model.setdefault(model, []).append(usage)
    by_model = {model: totals.usage_sum(usages) for model, usages in per_model.items()}
    status = _STATUS.get(job.status, "started")
    header = {
        "version": 2,
        "status": status,
        "eval": {
            "eval_id": str(job.id),
            "run_id": str(job.id),
            "created": _iso(job.created_at),
            "task": _task(job),
            "task_id": str(job.id),
            "task_args": {"env_config": job.env_config},
            "solver": job.task_app_kind,
            "dataset": {"name": job.env_name or None, "samples": job.num_seeds},
            "model": _model(job),
            "model_args": {k: v for k, v in (job.policy or {}).items() if k != "model"},
            "config": {"epochs": job.repeats},
            "metadata": {
                "evalhub_job_id": str(job.id),
                "task_app_url": job.task_app_url,
                "task_app_kind": job.task_app_kind,
            },  # fmt: skip
        },
        "plan": {"name": "plan", "steps": [{"solver": job.task_app_kind, "params": {}}]},
        "results": _results(summary),
        "stats": {
            "started_at": _iso(job.started_at or job.created_at),
            "completed_at": _iso(job.completed_at) if job.completed_at else "",
            "model_usage": {model: model_usage(u) for model, u in by_model.items()},
        },
    }
    if status == "error":
        header["error"] = {"message": job.error or "the job failed", "traceback": "",
                           "traceback_ansi": ""}  # fmt: skip
    return header


def _results(summary: dict[str, Any]) -> dict[str, Any]:
    done = summary["num_successful"] + summary["num_failed"]
    scores = [_score("reward", {"mean": summary["mean_score"], "pass_rate": summary.get("pass_rate"),
                                "std": summary["std_score"]})]  # fmt: skip
    if summary.get("num_judged"):
        scores.append(_score("judge", {"mean": summary["mean_verifier_score"]}))
    return {"total_samples": summary["num_seeds"], "completed_samples": done, "scores": scores}


def _score(name: str, metrics: dict[str, float | None]) -> dict[str, Any]:
    return {
        "name": name,
        "scorer": name,
        "metrics": {k: {"name": k, "value": v} for k, v in metrics.items() if v is not None},
    }


def _sample(job: EvalJob, seed_run: Any, attempts: list, redactor: Redactor) -> dict[str, Any]:
    row, document = trace_of(job=job, seed_run=seed_run, redactor=redactor, attempts=attempts)
    attempts = sorted(attempts, key=lambda pair: pair[0].number)
    policy = [c for _, calls in attempts[-1:] for c in calls if c.kind == CallKind.POLICY]
    messages = [_message(m) for m in redactor.value(
        transcript((c.route, c.request, c.response) for c in policy if c.route != "embeddings")
    )]  # fmt: skip
    every = [c for _, calls in attempts for c in calls]
    sample = {
        "id": seed_run.seed,
        "epoch": seed_run.repeat + 1,
        "input": _input(messages),
        "target": "",
        "messages": messages,
        "output": _output(messages, policy),
        "scores": _sample_scores(row),
        "metadata": {
            "status": row["status"],
            "attempts": row["attempts"],
            "latency_ms": row["latency_ms"],
            "cost_usd": row["cost_usd"],
            "num_llm_calls": row["num_llm_calls"],
        },  # fmt: skip
        "model_usage": _usage_by_model(every),
        "started_at": document["started_at"],
        "completed_at": document["finished_at"],
        "total_time": (row["latency_ms"] or 0) / 1000 or None,
        "uuid": f"{job.id}-{seed_run.seed}-{seed_run.repeat}",
    }
    if seed_run.status in (SeedStatus.FAILED, SeedStatus.CANCELLED):
        sample["error"] = {"message": document["error"] or seed_run.status, "traceback": "",
                           "traceback_ansi": ""}  # fmt: skip
    return sample


def _sample_scores(row: dict[str, Any]) -> dict[str, Any] | None:
    scores: dict[str, Any] = {}
    if row["task_app_score"] is not None:
        scores["task_app"] = {"value": row["task_app_score"]}
    if row.get("verifier_score") is not None:
        scores["judge"] = {"value": row["verifier_score"],
                           "explanation": row.get("verifier_justification")}  # fmt: skip
    if row["score"] is not None:
        scores["reward"] = {"value": row["score"]}
    return scores or None


def _usage_by_model(calls: list[Any]) -> dict[str, Any]:
    by_model: dict[str, list[Any]] = {}
    for call in calls:
        by_model.setdefault(call.model_answered or call.model_requested or "?", []).append(call)
    return {m: model_usage(totals.usage_from_calls(cs)) for m, cs in by_model.items()}


def _input(messages: list[dict[str, Any]]) -> Any:
    """What the model was first given: the messages before its first answer."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    return messages[:first] or ""


def _output(messages: list[dict[str, Any]], policy: list[Any]) -> dict[str, Any]:
    answers = [m for m in messages if m["role"] == "assistant"]
    if not answers:
        return {"model": "", "choices": []}
    last = policy[-1] if policy else None
    model = (last.model_answered or last.model_requested) if last is not None else ""
    response = last.response if last is not None and isinstance(last.response, dict) else {}
    choices = response.get("choices") if isinstance(response.get("choices"), list) else [{}]
    finish = (choices[0] if choices and isinstance(choices[0], dict) else {}).get("finish_reason")
    stop = _STOP.get(str(finish), "unknown")
    return {"model": model, "choices": [{"message": answers[-1], "stop_reason": stop}]}


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions message as Inspect's ChatMessage."""
    role = message.get("role")
    role = role if role in ("system", "user", "assistant", "tool") else "user"
    out: dict[str, Any] = {"role": role, "content": _content(message.get("content"))}
    if role == "assistant":
        calls = [_tool_call(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        if calls:
            out["tool_calls"] = calls
    if role == "tool":
        out["tool_call_id"] = message.get("tool_call_id")
        out["function"] = message.get("name")
    return out


def _content(content: Any) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [{"type": "text", "text": p["text"]} for p in content
                 if isinstance(p, dict) and isinstance(p.get("text"), str)]  # fmt: skip
        if parts:
            return parts
    return json.dumps(content, ensure_ascii=False)


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    out = {"id": str(call.get("id") or ""), "function": str(function.get("name") or ""),
           "type": "function", "arguments": arguments if isinstance(arguments, dict) else {}}  # fmt: skip
    if not isinstance(arguments, dict):
        out["parse_error"] = f"arguments are not a JSON object: {str(raw)[:200]}"
    return out
