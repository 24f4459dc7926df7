"""A job's results as CSV (one row per sample) and the conversations of its passing samples as
chat-format JSONL for fine-tuning, whichever wire format the policy spoke
(`traces.calls.conversation.sample`): every value through the job's redactor."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from jobs import labels
from jobs.agreement import people_verdict
from jobs.models import AttemptStatus, EvalJob, SeedRun, SeedStatus
from traces.calls import conversation
from traces.models import CallKind, LLMCall
from traces.redaction import Redactor, job_redactor
from traces.results import comparison, result_rows

CSV_COLUMNS = ("seed", "repeat", "status", "score", "reward_mean", "outcome_score",
               "events_score", "verifier_score", "latency_ms", "tokens", "cost_usd",
               "num_llm_calls", "attempts", "reused", "error", "started_at", "finished_at",
               "num_labels", "label_verdict", "label_score", "label_notes", "label_tags")  # fmt: skip
COMPARISON_COLUMNS = ("seed", "base_score", "candidate_score", "delta", "base_passed",
                      "candidate_passed", "change")  # fmt: skip
CHUNK = 200


def results_csv_lines(*, job: EvalJob) -> Iterator[str]:
    """The CSV, a line at a time (header first)."""
    redactor = job_redactor(job=job)
    _, rows = result_rows.job_results(job=job)
    carried = labels.job_labels_by_sample(job=job)
    redacted = (
        {**row, "error": redactor.text(row["error"]) if row["error"] else "",
         **_label_cells(carried.get((row["seed"], row["repeat"]), []), redactor)}
        for row in rows
    )  # fmt: skip
    return csv_lines(CSV_COLUMNS, redacted)


def comparison_csv_lines(*, seeds: list[dict[str, Any]]) -> Iterator[str]:
    """A comparison's seeds (`traces.results.comparison.jobs_compare`, in the order given) as
    CSV: both scores, the difference, whether each passed and what changed
    (`comparison.seed_outcome`: regression, loss, improvement, win or tie)."""
    rows = ({**s, "change": comparison.seed_outcome(s)} for s in seeds)
    return csv_lines(COMPARISON_COLUMNS, rows)


def csv_lines(columns: tuple[str, ...], rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Rows as CSV lines, the header first; a missing value is an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def _label_cells(bodies: list[dict], redactor: Redactor) -> dict[str, Any]:
    """A sample's labels in the CSV: how many, people's verdict (`jobs.agreement`), the mean
    of their corrected scores, their notes (redacted) and tags."""
    scores = [b["score"] for b in bodies if b["score"] is not None]
    return {
        "num_labels": len(bodies),
        "label_verdict": people_verdict([b["verdict"] for b in bodies]),
        "label_score": sum(scores) / len(scores) if scores else None,
        "label_notes": " | ".join(redactor.text(b["notes"]) for b in bodies if b["notes"]),
        "label_tags": " ".join(dict.fromkeys(t for b in bodies for t in b["tags"])),
    }


def sft_lines(
    *, job: EvalJob, min_score: float | None, verdict: str | None = None
) -> Iterator[str]:
    """One JSON line per succeeded sample scoring at least `min_score` (every succeeded sample
    when None) whose last LLM call of the succeeded attempt has a conversation; with `verdict`,
    only the samples people said that of (`jobs.agreement.people_verdict`). A labelled
    sample's line has its `labels`."""
    redactor = job_redactor(job=job)
    runs = SeedRun.objects.filter(job=job, status=SeedStatus.SUCCEEDED).order_by("seed", "repeat")
    if min_score is not None:
        runs = runs.filter(score__gte=min_score)
    carried = labels.job_labels_by_sample(job=job)
    for run in runs.iterator(chunk_size=CHUNK):
        said = carried.get((run.seed, run.repeat), [])
        if verdict is not None and people_verdict([b["verdict"] for b in said]) != verdict:
            continue
        line = conversation.sample(_last_calls(run))
        if line is None:
            continue
        line = {**redactor.value(line), "seed": run.seed, "repeat": run.repeat,
                "score": run.score}  # fmt: skip
        if said:
            line["labels"] = [_label_shown(b, redactor) for b in said]
        yield json.dumps(line, cls=DjangoJSONEncoder) + "\n"


def _label_shown(body: dict, redactor: Redactor) -> dict[str, Any]:
    keep = ("verdict", "score", "tags", "author", "on_original", "labelled_on", "updated_at")
    return {**{k: body[k] for k in keep}, "notes": redactor.text(body["notes"])}


def _last_calls(run: SeedRun) -> list[tuple[str, Any, Any]]:
    """The policy's last answered call of the sample's last succeeded attempt, with the calls
    before it when its history is kept by the provider (`previous_response_id`)."""
    calls = LLMCall.objects.filter(
        attempt__seed_run=run,
        attempt__status=AttemptStatus.SUCCEEDED,
        kind=CallKind.POLICY,
        http_status=200,
    ).exclude(route="embeddings")
    last = calls.order_by("-attempt__number", "-seq").first()
    if last is None:
        return []
    chain = [last]
    if conversation.continues_elsewhere(last.request):
        chain = list(calls.filter(attempt_id=last.attempt_id, seq__lte=last.seq).order_by("seq"))
    return [(c.route, c.request, c.response) for c in chain]
