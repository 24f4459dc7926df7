"""GET /metrics: every process's Prometheus metrics (evalhub.metrics) in the text format, and
the queue's depth read from the broker at scrape time.

It answers only `Authorization: Bearer <EVALHUB_METRICS_TOKEN>` (compared in constant time);
while that setting is empty, /metrics is off (404). A token of its own rather than an API key:
an API key is a user's, and these figures are the whole deployment's (every user's calls by
model); the scraper needs no account. docs/observability.md has a scrape config.
"""

from __future__ import annotations

import hmac
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily

from evalhub import metrics
from jobs.dispatch import queue_waiting

# The longest a scrape waits for the broker's count; past it the queue's figure is left out.
QUEUE_TIMEOUT_S = 0.5


class QueueCollector:
    """`evalhub_queue_waiting`: messages waiting for a free worker thread, counted by the
    broker when scraped, in one thread of its own: a broker that does not answer costs a
    scrape QUEUE_TIMEOUT_S at most, and never more than one count waits on it at once."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-queue")
        self._pending: Future | None = None
        self._lock = threading.Lock()

    def collect(self):
        with self._lock:
            if self._pending is None or self._pending.done():
                self._pending = self._pool.submit(queue_waiting)
            pending = self._pending
        try:
            waiting = pending.result(timeout=QUEUE_TIMEOUT_S)
        except FutureTimeout:
            waiting = None
        if waiting is None:
            return
        yield GaugeMetricFamily(
            "evalhub_queue_waiting",
            "Job messages waiting in the broker's queue for a free worker thread.",
            value=waiting,
        )


_queue = QueueCollector()


def _authorized(request) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    token = settings.EVALHUB_METRICS_TOKEN
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


@require_GET
def metrics_view(request):
    if not settings.EVALHUB_METRICS_TOKEN:
        return JsonResponse({"detail": "/metrics is off: set EVALHUB_METRICS_TOKEN."}, status=404)
    if not _authorized(request):
        response = JsonResponse({"detail": "Authorization must be 'Bearer <metrics token>'."},
                                status=401)  # fmt: skip
        response["WWW-Authenticate"] = 'Bearer realm="evalhub-metrics"'
        return response
    metrics.dead_processes_forget()
    registry = metrics.registry_of_every_process()
    registry.register(_queue)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
