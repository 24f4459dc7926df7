"""Writing LLM call records, in the interceptor's writer thread (never on the event loop).

A forwarded call's row is written ahead, in flight (`llm_call_ahead`, `llm_calls_ahead_save`),
before the call reaches its provider, and completed with its answer by the same row's id
(`llm_call_build`, `llm_calls_save`). A row still in flight long after its call started was
lost with its web process (`llm_calls_lost_mark`): its usage reads as unknown, never 0."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    connection,
    transaction,
)
from django.db.models import F

from evalhub import jsonvalues
from jobs import figures as kept
from jobs.models import RolloutAttempt
from traces.calls import replay
from traces.calls.call_rows import (
    call_new,
    calls_insert,
    calls_insert_numbered,
    calls_number,
    calls_update,
)
from traces.calls.pricing import usage_cost
from traces.calls.usage import TokenUsage, sse_events, usage_estimate
from traces.calls.wire import response_from_stream, usage_of
from traces.models import CallState, LLMCall

log = logging.getLogger(__name__)

# Held by a thread of this process while it numbers and inserts rows, until they are committed:
# the interceptor's two writer threads never give two calls of an attempt the same number.
_NUMBERING = threading.Lock()
# The error of a call lost with its web process.
LOST_ERROR = "lost: the web process serving this call stopped before its answer was recorded"


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
    # Why the interceptor refused the call itself, if it did (traces.models.Refusal).
    refusal: str = ""
    ttft_ms: float | None = None
    latency_ms: float | None = None
    # Who made the call: the policy, or the verifier's judge (traces.models.CallKind).
    kind: str = "policy"
    # The id of its row written ahead (in flight) before it was forwarded, if it was.
    row_id: int | None = None
    # The caller's W3C traceparent header, when it sent a valid one.
    traceparent: str = ""
    # In a replay (traces.calls.replay): how it was answered, and the recording that did.
    replay: str = ""
    replayed: replay.Recorded | None = None
    request_hash: str = ""  # a live call of a job with a cache: its key (replay.cache_key)


def llm_call_build(*, record: CallRecord) -> LLMCall:
    """An unsaved LLMCall with usage and cost from the record (its row's id if written ahead)."""
    if record.replayed is not None:
        return replay.replayed_call(record)
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
    usage = usage or TokenUsage(prompt_tokens=0, completion_tokens=0)
    model_requested = str(record.request.get("model") or "")
    model_answered = str((response or {}).get("model") or "")
    cost = usage_cost(
        usage, price_provider=record.price_provider,
        model_requested=model_requested, model_answered=model_answered,
    )  # fmt: skip
    return call_new(
        id=record.row_id,
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
        refusal=record.refusal,
        started_at=record.started_at,
        ttft_ms=record.ttft_ms,
        latency_ms=record.latency_ms,
        traceparent=record.traceparent,
        replay=record.replay,
        request_hash=record.request_hash,
    )


def llm_call_ahead(*, record: CallRecord) -> LLMCall:
    """The row of a call about to be forwarded: in flight, its usage not known yet (null, and
    not `cost_unknown`: the answer is expected)."""
    return call_new(
        attempt_id=record.attempt_id,
        seq=0,
        kind=record.kind,
        provider=record.provider,
        model_requested=str(record.request.get("model") or "")[:255],
        stream=record.stream,
        route=record.route,
        request=record.request,
        started_at=record.started_at,
        state=CallState.IN_FLIGHT,
    )


def llm_calls_ahead_save(*, calls: list[LLMCall]) -> list[LLMCall]:
    """Insert the rows of calls about to be forwarded, numbered as `llm_calls_save` numbers
    them; returns those saved, each with its id. Many rows a statement, committed as it runs
    (a call waits for it; one with its id is in the database): tried again, only those
    without one are inserted. Their jobs' settled figures stay: a call in flight changes no
    sum (its completion drops them)."""
    new = sorted((c for c in calls if c.pk is None), key=lambda c: (c.attempt_id, c.started_at))
    if new:
        _commit_unawaited()
        try:
            with _NUMBERING:
                calls_insert_numbered(new)
        except (IntegrityError, DataError):
            # One bad row must not lose the others (a statement saves all its rows or none).
            for call in new:
                if call.pk is None:
                    _save_one(call)
    return [call for call in calls if call.pk is not None]


def llm_calls_save(*, calls: list[LLMCall]) -> list[LLMCall]:
    """Save built calls: those written ahead (their id set) completed in place, the others
    numbered per attempt in the order they started and inserted; and drop the settled figures
    of their jobs (`jobs.figures`) in the same transaction.

    Every statement is written out rather than built by the ORM (`traces.calls.call_rows`): a
    lone call's ORM aggregate and `bulk_create` cost several times the database work (the
    writer saves after every few calls; at one caller a batch may be a single call)."""
    return _saved(calls, _write, forget=True)


def _write(calls: list[LLMCall]) -> None:
    new = [call for call in calls if call.pk is None]
    if new:
        calls_number(new)
        calls_insert(new)
    calls_update([call for call in calls if call.pk is not None])


def _saved(calls: list[LLMCall], write, *, forget: bool) -> list[LLMCall]:
    calls = sorted(calls, key=lambda c: (c.attempt_id, c.started_at))
    if not calls:
        return calls
    try:
        _commit_unawaited()
        numbering = any(call.pk is None for call in calls)
        with _NUMBERING if numbering else contextlib.nullcontext(), transaction.atomic():
            write(calls)
            if forget:
                kept.forget_settled_of_attempts(attempt_ids=sorted({c.attempt_id for c in calls}))
        return calls
    except (IntegrityError, DataError):
        # One bad row must not lose the others: save them one by one. (Anything else, e.g. a
        # locked or lost database, propagates: the writer retries the whole batch.)
        saved = [call for call in calls if _save_one(call)]
    if saved and forget:
        kept.forget_settled_of_attempts(attempt_ids=sorted({c.attempt_id for c in saved}))
    return saved


def _save_one(call: LLMCall) -> bool:
    try:
        with transaction.atomic():
            _save_row(call)
        return True
    except IntegrityError:
        log.warning("dropped an LLM call of attempt %s (the attempt is gone)", call.attempt_id)
        return False
    except DataError as exc:
        # E.g. a NUL character PostgreSQL's jsonb refuses: keep the numbers, not the exchange.
        log.warning("storing an LLM call without its request/response: %s", exc)
        note = {"not_stored": f"the database refused this document ({type(exc).__name__})"}
        if call.pk is None:  # a row written ahead has its request stored already
            call.request = note
        call.response = note
        try:
            with transaction.atomic():
                _save_row(call)
            return True
        except DatabaseError:
            log.exception("dropped an LLM call of attempt %s", call.attempt_id)
            return False


def _save_row(call: LLMCall) -> None:
    if call.pk is None:
        calls_number([call])
        call.save()
    else:  # completed in place (a row that is gone is inserted: `calls_update`)
        calls_update([call])


def _commit_unawaited() -> None:
    """On PostgreSQL, the commits of this thread's connection do not wait for their WAL to be
    flushed to disk (the WAL writer flushes it within `wal_writer_delay`, 200 ms): a row
    written ahead is on a call's path, and an fsync per commit cost it milliseconds. Nothing
    is lost when the web process dies, only when PostgreSQL itself crashes in that moment;
    then a row written ahead that is gone is inserted whole by its completion (`calls_update`), and
    a completion that is gone leaves its row in flight, marked lost later: unknown, never 0.
    Set once per connection, outside a transaction (so that it holds)."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    connection.ensure_connection()
    if getattr(connection, "_commit_unawaited_on", None) is not connection.connection:
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO OFF")
        connection._commit_unawaited_on = connection.connection


def llm_calls_lost_mark(*, older_than: datetime) -> int:
    """Mark lost the calls still in flight that started before `older_than`: their web process
    died before it recorded their answers. Their usage is unknown (tokens null, the cost
    unknown: never 0); their jobs' settled figures are dropped. Returns how many."""
    in_flight = LLMCall.objects.filter(state=CallState.IN_FLIGHT, started_at__lt=older_than)
    with transaction.atomic():
        attempt_ids = sorted(set(in_flight.values_list("attempt_id", flat=True)))
        if not attempt_ids:
            return 0
        lost = in_flight.filter(attempt_id__in=attempt_ids).update(
            state=CallState.LOST, cost_unknown=True, error=LOST_ERROR
        )
        kept.forget_settled_of_attempts(attempt_ids=attempt_ids)
    return lost


def _response_document(record: CallRecord) -> dict[str, Any] | None:
    if not record.response_body:
        return {"error": {"message": record.error}} if record.error else None
    if record.response_is_sse:
        doc = response_from_stream(record.route, sse_events(record.response_body))
        if record.error and "error" not in doc:
            doc["error"] = {"message": record.error}
        return doc
    try:
        doc = jsonvalues.loads(record.response_body)
    except (ValueError, RecursionError):
        return {"raw": record.response_body[:10_000].decode("utf-8", errors="replace")}
    return doc if isinstance(doc, dict) else {"raw": doc}


def attempt_call_admit(*, attempt_id: int, max_calls: int) -> bool:
    """Let one more LLM call of the attempt through unless `max_calls` already were: one
    conditional UPDATE, so the web processes that share an attempt's calls together never let
    more than `max_calls` through."""
    admitted = RolloutAttempt.objects.filter(pk=attempt_id, llm_calls_admitted__lt=max_calls)
    return bool(admitted.update(llm_calls_admitted=F("llm_calls_admitted") + 1))
