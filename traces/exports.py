"""A job's results as CSV (one row per sample) and the conversations of its passing samples as
chat-format JSONL for fine-tuning: every value through the job's redactor."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from jobs.models import AttemptStatus, EvalJob, SeedRun, SeedStatus
from traces import totals
from traces.models import LLMCall
from traces.redaction import job_redactor

CSV_COLUMNS = ("seed", "repeat", "status", "score", "reward_mean", "outcome_score",
               "events_score", "verifier_score", "latency_ms", "tokens", "cost_usd",
               "num_llm_calls", "attempts", "reused", "error", "started_at", "finished_at")  # fmt: skip
CHUNK = 200


def results_csv_lines(*, job: EvalJob) -> Iterator[str]:
    """The CSV, a line at a time (header first)."""
    redactor = job_redactor(job=job)
    _, rows = totals.job_results(job=job)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        row = {**row, "error": redactor.text(row["error"]) if row["error"] else ""}
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in CSV_COLUMNS])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def sample_messages(call: LLMCall) -> dict[str, Any] | None:
    """The conversation as the model saw it in this call, with its answer appended: the request's
    messages (tool calls and tool results included) and the assistant message it answered."""
    request = call.request if isinstance(call.request, dict) else {}
    messages = request.get("messages")
    choices = (call.response or {}).get("choices") if isinstance(call.response, dict) else None
    if not isinstance(messages, list) or not choices or not isinstance(choices[0], dict):
        return None
    answer = choices[0].get("message")
    if not isinstance(answer, dict):
        return None
    line: dict[str, Any] = {"messages": [*messages, answer]}
    if request.get("tools"):
        line["tools"] = request["tools"]
    return line


def sft_lines(*, job: EvalJob, min_score: float | None) -> Iterator[str]:
    """One JSON line per succeeded sample scoring at least `min_score` (every succeeded sample
    when None) whose last LLM call of the succeeded attempt has a conversation."""
    redactor = job_redactor(job=job)
    runs = SeedRun.objects.filter(job=job, status=SeedStatus.SUCCEEDED).order_by("seed", "repeat")
    if min_score is not None:
        runs = runs.filter(score__gte=min_score)
    for run in runs.iterator(chunk_size=CHUNK):
        call = (
            LLMCall.objects.filter(
                attempt__seed_run=run, attempt__status=AttemptStatus.SUCCEEDED, http_status=200
            )
            .order_by("-attempt__number", "-seq")
            .first()
        )
        line = sample_messages(call) if call is not None else None
        if line is None:
            continue
        line = {**redactor.value(line), "seed": run.seed, "repeat": run.repeat,
                "score": run.score}  # fmt: skip
        yield json.dumps(line, cls=DjangoJSONEncoder) + "\n"
