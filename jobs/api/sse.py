"""GET /api/eval/jobs/{id}/events/stream: a job's events as server-sent events.

Each event is sent as `id: <seq>`, `event: <type>`, `data: <json>`; a client that reconnects
with `Last-Event-ID` (or asks with `?since_seq=`) gets only what follows. The stream stays open
(with keep-alive comments) until the job is over, and ends after its terminal event with an
`sse.stream.ended` event (no id: it is not one of the job's events), the end marker synth-ai's
streamers (0.7.x) stop on. An async view: a long-lived stream holds no thread while it waits,
and no database connection: it reads its key and its job when it opens, closes that
connection, and then waits on the process's one reader of events (jobs/api/event_poller.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from rest_framework import exceptions

from jobs import selectors
from jobs.api import event_poller
from jobs.api.authentication import ApiKeyAuthentication
from jobs.events import TERMINAL_EVENT_TYPES
from jobs.models import JobEvent
from jobs.public import event_body

KEEPALIVE_S = 15.0
MAX_SEQ = 2**31 - 1  # an event's seq is a 32-bit column: beyond it is no event, and an error
STREAM_ENDED = "sse.stream.ended"
SINCE_RULE = f"must be an integer from 0 to {MAX_SEQ}"


async def job_events_stream(request: HttpRequest, job_id: str) -> HttpResponse:
    if request.method != "GET":
        return JsonResponse({"error": "method_not_allowed", "detail": "Use GET."}, status=405)
    try:
        async with event_poller.poller().opening:
            user, job_pk = await sync_to_async(_open)(request, job_id)
    except exceptions.AuthenticationFailed as exc:
        response = JsonResponse(
            {"error": "authentication_failed", "detail": str(exc.detail)}, status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="evalhub"'
        return response
    if user is None:
        response = JsonResponse(
            {
                "error": "not_authenticated",
                "detail": "Authentication credentials were not provided.",
            },
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="evalhub"'
        return response
    if job_pk is None:
        return JsonResponse({"error": "not_found", "detail": "No such job."}, status=404)
    since = _since(request)
    if since is None:
        return JsonResponse(
            {
                "error": "invalid_request",
                "detail": f"Invalid request. since_seq: {SINCE_RULE}",
                "fields": {"since_seq": [SINCE_RULE]},
            },
            status=400,
        )
    response = StreamingHttpResponse(_stream(job_pk, since), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # let proxies pass each event on at once
    return response


def _open(request: HttpRequest, job_id: str):
    """(the user, the id of their job or None); the connection this took is closed, so an
    open stream holds none."""
    try:
        user = _authenticate(request)
        if user is None:
            return None, None
        try:
            return user, selectors.job_owned(owner=user, job_id=job_id).pk
        except Http404:
            return user, None
    finally:
        if not connection.in_atomic_block:  # a transaction around the view is not ours
            connection.close()


def _authenticate(request: HttpRequest):
    result = ApiKeyAuthentication().authenticate(request)
    if result:
        return result[0]
    # The dashboard's pages listen with their session (a GET changes nothing: no CSRF).
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def _since(request: HttpRequest) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("since_seq") or "0"
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if 0 <= value <= MAX_SEQ else None


def _format(event: JobEvent) -> str:
    data = json.dumps(event_body(event), cls=DjangoJSONEncoder)
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n"


def _ended(job_id: str) -> str:
    data = json.dumps({"type": STREAM_ENDED, "job_id": job_id, "message": "stream ended"})
    return f"event: {STREAM_ENDED}\ndata: {data}\n\n"


async def _stream(job_id: str, since: int) -> AsyncIterator[str]:
    async for chunk in _job_events(job_id, since):
        yield chunk
    yield _ended(job_id)


async def _job_events(job_id: str, since: int) -> AsyncIterator[str]:
    seq = since
    last_sent = time.monotonic()
    yield "retry: 2000\n\n"
    poller = event_poller.poller()
    while True:
        wait = max(0.0, KEEPALIVE_S - (time.monotonic() - last_sent))
        over, events = await poller.wait(job_id, seq, timeout=wait)
        for event in events:
            yield _format(event)
            seq = event.seq
            last_sent = time.monotonic()
            if event.type in TERMINAL_EVENT_TYPES:
                return
        if over:
            return
        if not events and time.monotonic() - last_sent >= KEEPALIVE_S:
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()
