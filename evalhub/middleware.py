"""What every request meets before a view: oversized bodies refused with a 413 before anything
reads them (a body sent chunked measured as received), a NUL character where a view reads text
refused, and a database that cannot be reached answered with a 503, not an HTML 500."""

from __future__ import annotations

import logging
import os

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

log = logging.getLogger(__name__)

API_PREFIX = "/api/"


def is_api(request: HttpRequest) -> bool:
    """Is it a call of the API (answered JSON), not a page?"""
    return request.path.startswith(API_PREFIX)


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH") or _received_length(request)
        try:
            too_big = int(length) > settings.EVALHUB_MAX_REQUEST_BYTES
        except ValueError:
            too_big = False
        if too_big:
            return JsonResponse(
                {
                    "error": "request_too_large",
                    "detail": f"Request body is {length} bytes; the limit is "
                    f"{settings.EVALHUB_MAX_REQUEST_BYTES} (EVALHUB_MAX_REQUEST_BYTES).",
                },
                status=413,
            )
        return self.get_response(request)


def _received_length(request: HttpRequest) -> str:
    """The length of a body sent without a Content-Length (chunked), which the ASGI handler
    has received whole before any middleware runs; set as CONTENT_LENGTH, so that Django and
    DRF read it (without one they read no body at all) and the limit above applies. "0" when
    there is none."""
    stream = getattr(request, "_stream", None)
    if not isinstance(request, ASGIRequest) or request._read_started or stream is None:
        return "0"
    start = stream.tell()
    size = stream.seek(0, os.SEEK_END) - start
    stream.seek(start)
    if size > 0:
        request.META["CONTENT_LENGTH"] = str(size)
    return str(size)


class NulRefusalMiddleware:
    """PostgreSQL refuses a NUL character in text, even to compare it, so one in a request's
    path, query or form would be a 500 wherever a query first met it. Refused here instead:
    in the path a 404 (nothing is named so), in a parameter a 400 naming it (JSON on the API).
    JSON bodies are the API's fields' to refuse, each naming itself (jobs/fields.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        api = is_api(request)
        if "\x00" in request.path:
            raise Http404  # answered by handler404 (evalhub.errors), as any unknown path is
        params = [request.GET]
        if not api and request.method == "POST":
            params.append(request.POST)  # a dashboard form (the API reads JSON bodies)
        name = next((n for p in params for n, v in p.lists() if _has_nul(n, v)), None)
        if name is None:
            return self.get_response(request)
        name = name.replace("\x00", "\\u0000")[:100]
        why = "must not contain a NUL character (\\u0000)"
        if api:
            return JsonResponse(
                {"error": "invalid_request", "detail": f"Invalid request. {name}: {why}",
                 "fields": {name: [why]}},
                status=400,
            )  # fmt: skip
        return HttpResponseBadRequest(f"{name}: {why}", content_type="text/plain")


def _has_nul(name: str, values: list[str]) -> bool:
    return "\x00" in name or any("\x00" in v for v in values)


class DatabaseUnavailableMiddleware:
    """A view that cannot reach the database (down, restarting, out of connections) answers
    503 with a Retry-After, as JSON on the API, instead of Django's HTML 500."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception):
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        log.warning("database unavailable for %s %s: %s", request.method, request.path, exception)
        detail = "The database cannot be reached; try again shortly."
        if is_api(request):
            response: HttpResponse = JsonResponse(
                {"error": "service_unavailable", "detail": detail}, status=503
            )
        else:
            response = HttpResponse(detail, status=503, content_type="text/plain")
        response["Retry-After"] = "5"
        return response
