"""The trace document of one seed: everything the policy saw and said, in order, with its cost.

The format is `evalhub.trace/1`, documented field by field in docs/trace-format.md and described
by docs/trace.schema.json. Every value passes through a `Redactor` on the way out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson
from django.db.models import Prefetch, QuerySet

from jobs.models import EvalJob, RolloutAttempt, SeedRun
from jobs.scores import Scores
from jobs.selectors import seed_run_pages
from traces.calls.conversation import as_chat
from traces.calls.messages import first_choice, reasoning_of
from traces.models import CallKind, CallState, LLMCall
from traces.redaction import Redactor
from traces.results import result_rows, totals
from traces.results.rows import decode, model_rows

SCHEMA = "evalhub.trace/1"
# What a pruned call keeps in place of its request (see traces.retention.traces_prune).
PRUNED_REQUEST = {"evalhub_pruned": True}

# Request fields shown on their own; every other request field is a parameter.
_REQUEST_OWN_FIELDS = ("messages", "tools", "tool_choice")


def seed_runs_with_calls(*, job: EvalJob) -> QuerySet[SeedRun]:
    """The job's seed runs by seed, with attempts and their LLM calls prefetched in order.
    Used with `.iterator(chunk_size=...)`: the prefetch then runs once per chunk."""
    calls = LLMCall.objects.order_by("seq", "id")
    attempts = RolloutAttempt.objects.order_by("number").prefetch_related(
        Prefetch("llm_calls", queryset=calls)
    )
    return (
        SeedRun.objects.filter(job=job)
        .order_by("seed", "repeat")
        .prefetch_related(Prefetch("rollout_attempts", queryset=attempts))
    )


def trace_rows(
    *, job: EvalJob, seed_run_ids: list[int], chunk_size: int
) -> Iterator[tuple[Any, list[tuple[Any, list[Any]]]]]:
    """(seed run, [(attempt, [LLM call, ...]), ...]) of these seed runs of the job, by seed and
    repeat, attempts by number and calls by seq: what `trace_of` takes, read `chunk_size` seed
    runs at a time (keyset pages, three queries a page) as `model_rows`."""
    for chunk in seed_run_pages(
        SeedRun.objects.filter(job=job, id__in=seed_run_ids),
        size=chunk_size,
        read=lambda page: list(model_rows(page, decoded=False)),
    ):
        attempts = model_rows(
            RolloutAttempt.objects.filter(seed_run_id__in=[r.id for r in chunk]).order_by(
                "seed_run_id", "number", "id"
            )
        )
        by_run: dict[int, list[tuple[Any, list[Any]]]] = {}
        by_attempt: dict[int, list[Any]] = {}
        for attempt in attempts:
            by_run.setdefault(attempt.seed_run_id, []).append(
                (attempt, by_attempt.setdefault(attempt.id, []))
            )
        calls = LLMCall.objects.filter(attempt_id__in=list(by_attempt)).order_by(
            "attempt_id", "seq", "id"
        )
        for call in model_rows(calls, decoded=False):
            by_attempt[call.attempt_id].append(call)
        for seed_run in chunk:  # decoded as it goes: the page waits as text
            attempts = [(a, [decode(c) for c in calls]) for a, calls in by_run.get(seed_run.id, [])]
            yield decode(seed_run), attempts


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def llm_call_request(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        return {"messages": None, "tools": None, "tool_choice": None, "params": {}, "raw": request}
    return {
        "messages": request.get("messages"),
        "tools": request.get("tools"),
        "tool_choice": request.get("tool_choice"),
        "params": {k: v for k, v in request.items() if k not in _REQUEST_OWN_FIELDS},
    }


def llm_call_response(response: Any) -> dict[str, Any] | None:
    if response is None:
        return None
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list):
        # An error body or something that is not a chat completion: keep it as it came.
        return {"message": None, "tool_calls": None, "reasoning": None, "finish_reason": None,
                "logprobs": None, "body": response}  # fmt: skip
    choice = first_choice(response)
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    body = {
        "id": response.get("id"),
        "model": response.get("model"),
        "message": message or None,
        "tool_calls": message.get("tool_calls") or None,
        "reasoning": reasoning_of(message),
        "finish_reason": choice.get("finish_reason"),
        "logprobs": choice.get("logprobs"),
    }
    if len(response["choices"]) > 1:
        body["other_choices"] = response["choices"][1:]
    if response.get("system_fingerprint"):
        body["system_fingerprint"] = response["system_fingerprint"]
    return body


# A call not done: still in flight, or lost with its web process (its usage unknown).
_CALL_STATUS = {CallState.IN_FLIGHT: "in_flight", CallState.LOST: "lost"}


def llm_call_entry(call: LLMCall, attempt: RolloutAttempt) -> dict[str, Any]:
    pruned = call.request == PRUNED_REQUEST
    # Every wire format reads as a chat conversation (traces.calls.conversation).
    request, response = as_chat(call.route, call.request, call.response)
    ok = call.error is None and (call.http_status is None or 200 <= call.http_status < 300)
    return {
        "attempt": attempt.number,
        "run_id": attempt.run_id,
        "seq": call.seq,
        "kind": call.kind,
        "provider": call.provider,
        "route": call.route,
        "model_requested": call.model_requested,
        "model_answered": call.model_answered,
        "stream": call.stream,
        "status": _CALL_STATUS.get(call.state) or ("ok" if ok else "error"),
        "http_status": call.http_status,
        "error": call.error,
        "started_at": iso(call.started_at),
        "ttft_ms": call.ttft_ms,
        "latency_ms": call.latency_ms,
        "content_pruned": pruned,
        "request": None if pruned else llm_call_request(request),
        "response": None if pruned else llm_call_response(response),
        "usage": {
            "prompt_tokens": call.prompt_tokens,
            "completion_tokens": call.completion_tokens,
            "cached_tokens": call.cached_tokens,
            "reasoning_tokens": call.reasoning_tokens,
            "cache_write_tokens": call.cache_write_tokens,
            "total_tokens": call.total_tokens,
            "estimated": call.usage_estimated,
            "unknown": call.state == CallState.LOST,
        },
        "cost_usd": call.cost_usd,
        "cost_unknown": call.cost_unknown,
        # In a replay (docs/replay.md): how it was answered, what it cost when recorded.
        "replay": call.replay or None,
        "replayed_cost_usd": call.replayed_cost_usd,
    }


def verifier_entry(row: dict[str, Any]) -> dict[str, Any]:
    """The judge's verdict of the seed (its calls are in `llm_calls` with `kind: "judge"`)."""
    return {
        "status": row["judge_status"],
        "verifier_score": row["verifier_score"],
        "justification": row["verifier_justification"],
        "error": row["verifier_error"],
        "task_app_score": row["task_app_score"],
        "reward": row["score"],
        "judge_tokens": row["judge_tokens"],
        "judge_cost_usd": row["judge_cost_usd"],
    }


def attempt_entry(attempt: RolloutAttempt) -> dict[str, Any]:
    # token_hash stays out: it identifies the interceptor token.
    return {
        "number": attempt.number,
        "run_id": attempt.run_id,
        "status": attempt.status,
        "http_status": attempt.http_status,
        "error": attempt.error,
        "started_at": iso(attempt.started_at),
        "finished_at": iso(attempt.finished_at),
        "latency_ms": attempt.latency_ms,
    }


def _task_app_answer(seed_run: SeedRun) -> dict[str, Any]:
    metrics = seed_run.metrics if isinstance(seed_run.metrics, dict) else None
    details = metrics.get("details") if metrics else None
    return {
        "metrics": metrics if metrics is not None else seed_run.metrics,
        "details": details,
        "trace": seed_run.task_trace,
    }


def seed_trace_document(
    *,
    job: EvalJob,
    seed_run: SeedRun,
    redactor: Redactor,
    attempts: Iterable[RolloutAttempt] | None = None,
) -> dict[str, Any]:
    """The trace document of one seed run, redacted. `attempts` (with `llm_calls` prefetched)
    saves the queries when the caller already has them."""
    return seed_trace(job=job, seed_run=seed_run, redactor=redactor, attempts=attempts)[1]


def seed_trace(
    *,
    job: EvalJob,
    seed_run: SeedRun,
    redactor: Redactor,
    attempts: Iterable[RolloutAttempt] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(result row as in /results, trace document) of one seed run."""
    if attempts is None:
        attempts = seed_runs_with_calls(job=job).get(pk=seed_run.pk).rollout_attempts.all()
    calls = [(attempt, list(attempt.llm_calls.all())) for attempt in attempts]
    return trace_of(job=job, seed_run=seed_run, redactor=redactor, attempts=calls)


def trace_of(
    *, job: EvalJob, seed_run: Any, redactor: Redactor, attempts: list[tuple[Any, list[Any]]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(result row, trace document) of a seed run given its attempts, each with its LLM calls
    in order: model instances, or the rows `trace_rows` reads (the same attribute names)."""
    attempts = sorted(attempts, key=lambda pair: pair[0].number)
    pairs = [(attempt, call) for attempt, calls in attempts for call in calls]
    usage = totals.usage_from_calls(call for _, call in pairs if call.kind == CallKind.POLICY)
    judge = totals.usage_from_calls(call for _, call in pairs if call.kind == CallKind.JUDGE)
    row = result_rows.seed_result_row(seed_run, usage, judge)
    document = {
        **document_head(job=job, seed_run=seed_run, row=row, usage=usage,
                        attempts=[a for a, _ in attempts]),
        "llm_calls": [llm_call_entry(call, attempt) for attempt, call in pairs],
        "verifier": document_verifier(seed_run=seed_run, row=row),
    }  # fmt: skip
    return row, redactor.value(document)


def document_head(
    *, job: EvalJob, seed_run: Any, row: dict[str, Any], usage: totals.Usage, attempts: list[Any]
) -> dict[str, Any]:
    """The trace document up to its `llm_calls` (which `document_verifier` follows), not
    redacted: what a streamed document writes before its calls (`traces.zip.seed_stream`)."""
    return {
        "schema": SCHEMA,
        "job_id": job.id,
        "seed": seed_run.seed,
        "repeat": seed_run.repeat,
        "reused": seed_run.reused_from_id is not None,
        "status": seed_run.status,
        "error": seed_run.error,
        **Scores.fields_of(seed_run),
        "outcome_objectives": row["outcome_objectives"],
        "latency_ms": seed_run.latency_ms,
        "started_at": iso(seed_run.started_at),
        "finished_at": iso(seed_run.finished_at),
        "usage": {
            "total_tokens": usage.total_tokens,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "cost_usd": usage.cost_usd,
            "cost_unknown": usage.cost_unknown,
            "num_llm_calls": usage.num_llm_calls,
            "llm_calls_usage_unknown": usage.usage_unknown,
        },
        "attempts": [attempt_entry(a) for a in attempts],
        "task_app": {**_task_app_answer(seed_run), "kind": job.task_app_kind},
    }


def document_verifier(*, seed_run: Any, row: dict[str, Any]) -> dict[str, Any] | None:
    """The document's last field, after its `llm_calls`."""
    return verifier_entry(row) if seed_run.judge_status else None


def document_bytes(document: dict[str, Any]) -> bytes:
    """Indented, so the file reads in an editor; UTF-8 kept as is. orjson does this about ten
    times faster than the json module, whose C encoder is not used when indenting."""
    try:
        return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # e.g. an integer beyond 64 bits from a task app
        return json.dumps(document, indent=2, ensure_ascii=False, default=str).encode()
