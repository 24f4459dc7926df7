"""Refuse oversized API bodies with a 413 before anything reads them."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH") or "0"
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
