"""GET /api/eval/jobs/{id}/events/stream: a job's events as server-sent events.

Each event is sent as `id: <seq>`, `event: <type>`, `data: <json>`; a client that reconnects
with `Last-Event-ID` (or asks with `?since_seq=`) gets only what follows. The stream stays open
(with keep-alive comments) until the job is over, and ends after its terminal event with an
`sse.stream.ended` event (no id: it is not one of the job's events), the end marker synth-ai's
streamers (0.7.x) stop on. An async view: a long-lived stream holds no thread while it waits.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from rest_framework import exceptions

from jobs import selectors
from jobs.authentication import ApiKeyAuthentication
from jobs.events import TERMINAL_EVENT_TYPES
from jobs.models import EvalJob, JobEvent
from jobs.public import event_body

POLL_S = 0.5
KEEPALIVE_S = 15.0
STREAM_ENDED = "sse.stream.ended"


async def job_events_stream(request: HttpRequest, job_id: str) -> HttpResponse:
    if request.method != "GET":
        return JsonResponse({"error": "method_not_allowed", "detail": "Use GET."}, status=405)
    try:
        user = await sync_to_async(_authenticate)(request)
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
    job = await sync_to_async(selectors.job_get_for_owner)(owner=user, job_id=job_id)
    if job is None:
        return JsonResponse({"error": "not_found", "detail": "No such job."}, status=404)
    since = _since(request)
    if since is None:
        return JsonResponse(
            {
                "error": "invalid_request",
                "detail": "Invalid request. since_seq: must be a non-negative integer",
                "fields": {"since_seq": ["must be a non-negative integer"]},
            },
            status=400,
        )
    response = StreamingHttpResponse(_stream(job.pk, since), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # let proxies pass each event on at once
    return response


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
    return value if value >= 0 else None


def _events_after(job_id: str, seq: int) -> tuple[bool, list[JobEvent]]:
    # The status is read first: a terminal status means its event is already committed (both
    # are written in one transaction), so the events read next include it.
    try:
        terminal = EvalJob.objects.only("status").get(pk=job_id).is_terminal
        events = list(JobEvent.objects.filter(job_id=job_id, seq__gt=seq).order_by("seq")[:500])
    finally:
        close_old_connections()
    return terminal, events


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
    while True:
        terminal, events = await sync_to_async(_events_after)(job_id, seq)
        for event in events:
            yield _format(event)
            seq = event.seq
            last_sent = time.monotonic()
            if event.type in TERMINAL_EVENT_TYPES:
                return
        if terminal and not events:
            return
        if events:
            continue  # there may be more than one page
        if time.monotonic() - last_sent > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(POLL_S)
