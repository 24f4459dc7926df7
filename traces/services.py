"""Writing LLM call records. Runs in the interceptor's writer thread, never on the hot path."""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    DataError,
    IntegrityError,
    connection,
    connections,
    transaction,
)
from django.db.models import F

from jobs import figures as kept
from jobs.models import RolloutAttempt
from traces.models import LLMCall
from traces.pricing import call_cost
from traces.usage import TokenUsage, sse_events, usage_estimate
from traces.wire import response_from_stream, usage_of

log = logging.getLogger(__name__)


@dataclass
class CallRecord:
    """The raw facts of one intercepted call, gathered cheaply while serving it."""

    attempt_id: int
    job_id: str
    provider: str
    price_provider: str | None
    request: dict[str, Any]
    started_at: datetime
    stream: bool = False
    # The API the call spoke (traces.models.ROUTES).
    route: str = "chat.completions"
    # The upstream's answer exactly as received (JSON, or the SSE bytes of a stream).
    response_body: bytes = b""
    response_is_sse: bool = False
    http_status: int | None = None
    error: str | None = None
    # False when nothing reached the upstream (budget spent, bad request...): nothing was spent.
    forwarded: bool = True
    ttft_ms: float | None = None
    latency_ms: float | None = None
    # Who made the call: the policy, or the verifier's judge (traces.models.CallKind).
    kind: str = "policy"


def llm_call_build(*, record: CallRecord) -> LLMCall:
    """An unsaved LLMCall with usage and cost worked out from the record (seq is set later)."""
    response = _response_document(record)
    error = record.error
    if error is None and isinstance(response, dict) and response.get("error"):
        # A provider may answer 200 and put an error event in the stream.
        error = f"provider_error: {json.dumps(response['error'])[:2000]}"
    usage = usage_of(record.route, response.get("usage")) if response else None
    # A stream that broke off midway was still generated (and billed) up to the cut.
    answered_ok = record.forwarded and (record.http_status == 200 or record.response_is_sse)
    if usage is None and answered_ok:
        # The provider charged for this answer but did not say how much: estimate, and say so.
        usage = usage_estimate(request=record.request, response=response)
    if usage is None:
        usage = TokenUsage(prompt_tokens=0, completion_tokens=0)
    model_requested = str(record.request.get("model") or "")
    model_answered = str((response or {}).get("model") or "")
    if usage.total_tokens == 0 and usage.prompt_tokens == 0 and usage.completion_tokens == 0:
        cost: float | None = 0.0
    else:
        price = functools.partial(
            call_cost,
            price_provider=record.price_provider,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        cost = price(model=model_answered or model_requested)
        if cost is None and model_answered and model_answered != model_requested:
            # A dated snapshot name the library lacks: the requested alias may be known.
            cost = price(model=model_requested)
    return LLMCall(
        attempt_id=record.attempt_id,
        seq=0,
        kind=record.kind,
        provider=record.provider,
        model_requested=model_requested[:255],
        model_answered=model_answered[:255],
        stream=record.stream,
        route=record.route,
        request=record.request,
        response=response,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        total_tokens=usage.total_tokens,
        usage_estimated=usage.estimated,
        cost_usd=cost,
        cost_unknown=cost is None,
        http_status=record.http_status,
        error=error,
        started_at=record.started_at,
        ttft_ms=record.ttft_ms,
        latency_ms=record.latency_ms,
    )


def llm_calls_save(*, calls: list[LLMCall]) -> list[LLMCall]:
    """Save built calls, numbering them per attempt in the order they started, and drop the
    settled figures of their jobs (`jobs.figures`) in the same transaction.

    Every statement is written out rather than built by the ORM: a lone call's ORM aggregate
    and `bulk_create` cost several times the database work (the writer saves after every few
    calls; at one caller a batch may be a single call)."""
    calls = sorted(calls, key=lambda c: (c.attempt_id, c.started_at))
    if not calls:
        return calls
    try:
        with transaction.atomic():
            _number(calls)
            _insert(calls)
            kept.forget_settled_of_attempts(attempt_ids=sorted({c.attempt_id for c in calls}))
        return calls
    except (IntegrityError, DataError):
        # One bad row must not lose the others: save them one by one. (Anything else, e.g. a
        # locked or lost database, propagates: the writer retries the whole batch.)
        saved = [call for call in calls if _save_one(call)]
    if saved:
        kept.forget_settled_of_attempts(attempt_ids=sorted({c.attempt_id for c in saved}))
    return saved


def _save_one(call: LLMCall) -> bool:
    try:
        with transaction.atomic():
            _number([call])
            call.save()
        return True
    except IntegrityError:
        log.warning("dropped an LLM call of attempt %s (the attempt is gone)", call.attempt_id)
        return False
    except DataError as exc:
        # E.g. a NUL character PostgreSQL's jsonb refuses: keep the numbers, not the exchange.
        log.warning("storing an LLM call without its request/response: %s", exc)
        note = {"not_stored": f"the database refused this document ({type(exc).__name__})"}
        call.request, call.response = note, note
        try:
            with transaction.atomic():
                call.save()
            return True
        except DatabaseError:
            log.exception("dropped an LLM call of attempt %s", call.attempt_id)
            return False


def _number(calls: list[LLMCall]) -> None:
    """Number `calls` (sorted by attempt) after the last call each attempt has stored: one
    statement, a MAX per attempt, each answered from the (attempt, seq) index's last entry."""
    ids = sorted({call.attempt_id for call in calls})
    table = connection.ops.quote_name(LLMCall._meta.db_table)
    one = f"SELECT %s, (SELECT MAX(seq) FROM {table} WHERE attempt_id = %s)"
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join([one] * len(ids)), [i for i in ids for _ in (0, 1)])
        last = dict(cursor.fetchall())
    for attempt_id, group in groupby(calls, key=lambda c: c.attempt_id):
        for i, call in enumerate(group, start=(last.get(attempt_id) or 0) + 1):
            call.seq = i


def _insert(calls: list[LLMCall]) -> None:
    """INSERT the rows; each value prepared by its field, as the ORM would."""
    conn = connections[DEFAULT_DB_ALIAS]  # the thread's connection, looked up once
    fields, sql = _insert_statement(conn.vendor)
    rows = [[f.get_db_prep_save(getattr(c, f.attname), conn) for f in fields] for c in calls]
    with conn.cursor() as cursor:
        cursor.executemany(sql, rows)


@functools.cache
def _insert_statement(vendor: str) -> tuple[tuple, str]:
    fields = tuple(f for f in LLMCall._meta.concrete_fields if not f.primary_key)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    return fields, f"INSERT INTO {quote(LLMCall._meta.db_table)} ({columns}) VALUES ({marks})"


def _response_document(record: CallRecord) -> dict[str, Any] | None:
    if not record.response_body:
        return {"error": {"message": record.error}} if record.error else None
    if record.response_is_sse:
        doc = response_from_stream(record.route, sse_events(record.response_body))
        if record.error and "error" not in doc:
            doc["error"] = {"message": record.error}
        return doc
    try:
        doc = json.loads(record.response_body)
    except ValueError:
        return {"raw": record.response_body[:10_000].decode("utf-8", errors="replace")}
    return doc if isinstance(doc, dict) else {"raw": doc}


def attempt_call_admit(*, attempt_id: int, max_calls: int) -> bool:
    """Let one more LLM call of the attempt through unless `max_calls` already were: one
    conditional UPDATE, so the web processes that share an attempt's calls together never let
    more than `max_calls` through."""
    admitted = RolloutAttempt.objects.filter(pk=attempt_id, llm_calls_admitted__lt=max_calls)
    return bool(admitted.update(llm_calls_admitted=F("llm_calls_admitted") + 1))
