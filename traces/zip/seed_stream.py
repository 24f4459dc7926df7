"""One sample's result row and trace document as GET /api/eval/jobs/{id}/seeds/{seed} answers
them, written as JSON call by call: a sample with thousands of LLM calls is served in bounded
memory. The calls are read a page at a time (`traces.calls.pages`) twice: first without their
bodies, for the usage that leads the document, then whole, each page written and let go. The
value is the one `traces.zip.documents.seed_trace` makes, redacted the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.utils.encoders import JSONEncoder

from jobs.models import EvalJob, RolloutAttempt, SeedRun
from traces.calls.pages import attempt_call_pages, calls_without_bodies
from traces.models import CallKind
from traces.redaction import Redactor
from traces.results import result_rows, totals
from traces.results.rows import model_rows
from traces.zip.documents import document_head, document_verifier, llm_call_entry
from traces.zip.export import async_chunks

# LLM calls read per query, and the bytes gathered before a piece of the answer is sent.
PAGE_CALLS = 200
PIECE_BYTES = 64 * 1024


def _json(value: Any) -> bytes:
    """Compact JSON as the API's renderer writes it (UTC as `Z`, UTF-8 kept as is)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # e.g. an integer beyond 64 bits
        return json.dumps(
            value, cls=JSONEncoder, ensure_ascii=False, separators=(",", ":")
        ).encode()


def seed_trace_chunks(
    *, job: EvalJob, seed_run: SeedRun, redactor: Redactor, page_calls: int = PAGE_CALLS
) -> Iterator[bytes]:
    """`{"job_id", "seed", "repeat", "result", "trace"}` as JSON bytes, a piece at a time."""
    attempts = list(RolloutAttempt.objects.filter(seed_run=seed_run).order_by("number"))
    usage = totals.usage_from_calls(calls_without_bodies(attempts=attempts, kind=CallKind.POLICY))
    judge = totals.usage_from_calls(calls_without_bodies(attempts=attempts, kind=CallKind.JUDGE))
    row = result_rows.seed_result_row(seed_run, usage, judge)
    head = document_head(job=job, seed_run=seed_run, row=row, usage=usage, attempts=attempts)
    envelope = {"job_id": job.id, "seed": seed_run.seed, "repeat": seed_run.repeat, "result": row}
    parts = [
        _json(envelope)[:-1],
        b',"trace":',
        _json(redactor.value(head))[:-1],
        b',"llm_calls":[',
    ]
    size, first = 0, True
    for attempt in attempts:
        for page in attempt_call_pages(
            attempt_id=attempt.id, size=page_calls, read=lambda calls: list(model_rows(calls))
        ):
            for call in page:
                parts.append(b"" if first else b",")
                parts.append(_json(redactor.value(llm_call_entry(call, attempt))))
                size, first = size + len(parts[-1]), False
            if size >= PIECE_BYTES:
                yield b"".join(parts)
                parts, size = [], 0
    verifier = redactor.value(document_verifier(seed_run=seed_run, row=row))
    parts += [b'],"verifier":', _json(verifier), b"}}"]
    yield b"".join(parts)


def seed_trace_response(
    *, job: EvalJob, seed_run: SeedRun, redactor: Redactor, asynchronous: bool = False
) -> HttpResponse:
    """The body of GET /api/eval/jobs/{id}/seeds/{seed}: streamed under ASGI (the web process),
    in one piece under WSGI (Django's test client), as `traces.results.stream` answers."""
    chunks = seed_trace_chunks(job=job, seed_run=seed_run, redactor=redactor)
    if asynchronous:
        return StreamingHttpResponse(async_chunks(chunks), content_type="application/json")
    return HttpResponse(b"".join(chunks), content_type="application/json")
