"""What a request that matches nothing, or fails, is answered (Django's `handler404`,
`handler500`): under /api/ the API's JSON error, as DRF's views answer theirs
(`{"error", "detail"}`); elsewhere the dashboard's page saying why (the reason a view gave, such
as "Pick two jobs to compare."), where Django's bare page said only "Not Found"."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults

from evalhub.middleware import is_api


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    # A view's reason is a string; the resolver's is a dict of the routes it tried: not shown.
    reason = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    if is_api(request):
        # The path is not echoed: an unknown route may still carry a token in it.
        detail = reason or "No such route."
        return JsonResponse({"error": "not_found", "detail": detail}, status=404)
    context = {"reason": reason or "There is no page at this address."}
    return render(request, "frontend/not_found.html", context, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api(request):
        body = {"error": "server_error", "detail": "The server failed to answer; see its log."}
        return JsonResponse(body, status=500)
    return defaults.server_error(request)  # no template of ours: the failure may be in them
