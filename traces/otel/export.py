"""Exporting a job's samples as traces over OTLP/HTTP, from a worker, once they are final.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set. Spans are built
from the recorded rows (`traces.otel.spans`) by the tasks that build the job's zip members
while it runs and its zip as it ends (`traces.tasks`), each sample once (`TraceMember.exported`),
so nothing of it runs on a rollout's path or in the interceptor. They wait
in one bounded queue per worker process (`EVALHUB_OTEL_QUEUE_SPANS`); a thread of its own
hands them in batches to the OpenTelemetry SDK's OTLP/HTTP exporter. A full queue drops
spans instead of waiting, and an export the collector refused or never answered drops its
batch: both are counted, logged, and reported with the worker's heartbeat on `/healthz`.

The SDK's own `BatchSpanProcessor` is not used: it drops silently when its queue is full,
and saying what was lost is the point here.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from evalhub import heartbeats, metrics
from jobs.models import OPEN_JUDGE_STATUSES, EvalJob
from traces.models import TraceMember
from traces.otel.spans import SampleSpans
from traces.redaction import job_redactor
from traces.zip.documents import trace_of, trace_rows

log = logging.getLogger(__name__)

# Spans handed to the exporter at once, and how long a partial batch waits for more.
BATCH_SPANS = 512
BATCH_WAIT_S = 1.0
# Seed runs read from the database at once.
PAGE_SIZE = 100
# How long a stopping worker process waits for its queued spans to be handed over.
EXIT_FLUSH_S = 5.0
# A worker logs its drops at most this often.
LOG_EVERY_S = 10.0


def traces_endpoint() -> str:
    """Where spans go: the traces endpoint as given, or the base endpoint's `/v1/traces`."""
    if settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:
        return settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    base = settings.OTEL_EXPORTER_OTLP_ENDPOINT
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def otlp_headers(text: str) -> dict[str, str]:
    """`key=value,key2=value2` (values URL-encoded) as the OTLP exporter's headers."""
    headers = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            headers[key.strip().lower()] = unquote(value.strip())
    return headers


class SpanQueue:
    """A bounded queue of spans and the thread that exports them in batches."""

    def __init__(self, exporter: SpanExporter, *, max_spans: int):
        self.exporter = exporter
        self.max_spans = max_spans
        self.queue: deque[ReadableSpan] = deque()
        self.ready = threading.Condition()
        self.exported = self.dropped = self.in_flight = 0
        self._logged_drops, self._logged_at = 0, 0.0
        self.thread = threading.Thread(target=self._run, name="otel-export", daemon=True)
        self.thread.start()

    def put(self, spans: Sequence[ReadableSpan]) -> bool:
        """Queue a sample's spans, whole or not at all; never waits. False when dropped."""
        with self.ready:
            if len(self.queue) + len(spans) > self.max_spans:
                self.dropped += len(spans)
                metrics.otel_dropped(reason="queue_full", spans=len(spans))
                self._log_drops()
                return False
            self.queue.extend(spans)
            if len(self.queue) >= BATCH_SPANS:
                self.ready.notify()
        return True

    def stats(self) -> dict[str, int]:
        with self.ready:
            queued = len(self.queue) + self.in_flight
            return {"exported": self.exported, "dropped": self.dropped, "queued": queued}

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued span was handed over (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self.ready:
            self.ready.notify()
            while self.queue or self.in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.ready.wait(min(left, 0.05))
        return True

    def _run(self) -> None:
        while True:
            with self.ready:
                if len(self.queue) < BATCH_SPANS:
                    self.ready.wait(BATCH_WAIT_S)
                batch = [self.queue.popleft() for _ in range(min(BATCH_SPANS, len(self.queue)))]
                self.in_flight = len(batch)
            if batch:
                self._export(batch)

    def _export(self, batch: list[ReadableSpan]) -> None:
        try:
            ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
        except Exception:  # the exporter's own failure must not end the thread
            log.exception("OTLP export failed")
            ok = False
        with self.ready:
            self.in_flight = 0
            if ok:
                self.exported += len(batch)
            else:
                self.dropped += len(batch)
                metrics.otel_dropped(reason="export_failed", spans=len(batch))
                self._log_drops()
            self.ready.notify_all()

    def _log_drops(self) -> None:
        now = time.monotonic()
        if self.dropped > self._logged_drops and now - self._logged_at >= LOG_EVERY_S:
            log.warning("OTLP export to %s: %d span(s) dropped so far (%d exported)",
                        traces_endpoint(), self.dropped, self.exported)  # fmt: skip
            self._logged_drops, self._logged_at = self.dropped, now


_queue: SpanQueue | None = None
_queue_lock = threading.Lock()


def span_queue() -> SpanQueue | None:
    """This process's queue, started on first use; None while export is off."""
    global _queue
    endpoint = traces_endpoint()
    if not endpoint:
        return None
    with _queue_lock:
        if _queue is None:
            exporter = OTLPSpanExporter(
                endpoint=endpoint,
                headers=otlp_headers(settings.OTEL_EXPORTER_OTLP_HEADERS),
                timeout=settings.OTEL_EXPORTER_OTLP_TIMEOUT / 1000,
            )
            _queue = SpanQueue(exporter, max_spans=settings.EVALHUB_OTEL_QUEUE_SPANS)
            heartbeats.reporter("otel", _queue.stats)
            # A worker that stops hands over what it holds, for a moment at most.
            atexit.register(_queue.flush, EXIT_FLUSH_S)
        return _queue


def resource() -> Resource:
    return Resource.create({"service.name": settings.OTEL_SERVICE_NAME})


def job_spans(*, job: EvalJob, seed_run_ids: list[int]) -> Any:
    """Each of these seed runs' spans (a list per sample), redacted as the zip is."""
    redactor, res = job_redactor(job=job), resource()
    for seed_run, attempts in trace_rows(job=job, seed_run_ids=seed_run_ids, chunk_size=PAGE_SIZE):
        _, document = trace_of(job=job, seed_run=seed_run, redactor=redactor, attempts=attempts)
        parents = [c.traceparent for _, calls in sorted(attempts, key=lambda p: p[0].number)
                   for c in calls]  # fmt: skip
        yield SampleSpans(document, res).build(parents)


def job_traces_export(*, job_id: str) -> tuple[int, int] | None:
    """Queue the traces of the job's samples that are final (ended, their verdict written) and
    kept as zip members (`traces.zip.members`: built as the job runs and as it ends) but not
    exported yet, each once; (queued, dropped) samples, None while export is off."""
    queue = span_queue()
    job = EvalJob.objects.filter(pk=job_id).first()
    if queue is None or job is None:
        return None
    unexported = TraceMember.objects.filter(seed_run__job=job, exported=False).exclude(
        seed_run__judge_status__in=OPEN_JUDGE_STATUSES
    )
    ids = list(unexported.values_list("seed_run_id", flat=True))
    if not ids:
        return 0, 0
    TraceMember.objects.filter(seed_run_id__in=ids).update(exported=True)
    queued = dropped = 0
    for spans in job_spans(job=job, seed_run_ids=ids):
        if queue.put(spans):
            queued += 1
        else:
            dropped += 1
    log.info("job %s: %d sample trace(s) queued for OTLP export, %d dropped", job.id, queued,
             dropped)  # fmt: skip
    return queued, dropped
