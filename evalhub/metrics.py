"""Prometheus metrics, counted in every process and added up by whichever web process serves
`/metrics` (`evalhub/metrics_endpoint.py`; docs/observability.md).

prometheus_client's multiprocess mode: each process (every web process, every worker) keeps
its values in memory-mapped files of its own, named by its pid, in
`EVALHUB_METRICS_DIR/<host>/` (`PROMETHEUS_MULTIPROC_DIR`, which `evalhub/settings.py` sets
before anything imports prometheus_client: it reads it then). A scrape adds up the files of
every host, so containers sharing one volume (docker-compose.yml) are scraped through any web
process, their pids kept apart by their host names. Counting is an increment of a mapped
value under a lock: nothing on the interceptor's path waits on I/O.

A dead process's counters stay (their totals only grow); its gauges (rollouts in flight, the
writer's backlog) are dropped: at a scrape for the dead pids of this host
(`dead_processes_forget`), at a process's start for a predecessor of the same pid (a container
restarted), and at `make run`'s start for everything of this host (`host_files_clear`).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

if values.ValueClass is values.MutexValue:  # each process would count only for itself
    raise ImproperlyConfigured(
        "prometheus_client was imported before evalhub's settings set PROMETHEUS_MULTIPROC_DIR"
    )

HOST_DIR = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
# Models named in calls are the caller's words: past this many per process, "other".
MAX_MODELS = 200
OTHER = "other"
# The interceptor's added latency, in seconds: its own work is well under a millisecond; the
# buckets are fine there and reach the tail that matters (a blocked event loop, a slow write).
ADDED_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _start() -> None:
    """This host's folder, without the gauges of a dead process that had this pid (a
    container restarted with the same pid): before any value of ours is created."""
    HOST_DIR.mkdir(parents=True, exist_ok=True)
    mark_process_dead(os.getpid(), str(HOST_DIR))


_start()

LLM_CALLS = Counter(
    "evalhub_llm_calls",
    "LLM calls the interceptor recorded (each try of a retried call apart), by provider, "
    "model asked for, HTTP status ('none' when no answer came) and what answered: the "
    "provider, a recording (a replay or a cache: nothing spent) or evalhub (refused).",
    ["provider", "model", "status", "answered_by"],
)
INTERCEPTOR_ADDED = Histogram(
    "evalhub_interceptor_added_seconds",
    "Time a call relayed from a provider's answer spent in the interceptor, less the time "
    "spent waiting for the provider (its answer's headers and body).",
    buckets=ADDED_BUCKETS,
)
ROLLOUTS_STARTED = Counter(
    "evalhub_rollouts_started", "Rollouts the workers started, by job kind.", ["kind"]
)
ROLLOUTS_IN_FLIGHT = Gauge(
    "evalhub_rollouts_in_flight", "Rollouts running in the workers now, by job kind.",
    ["kind"], multiprocess_mode="livesum",
)  # fmt: skip
WRITER_BACKLOG = Gauge(
    "evalhub_interceptor_writer_backlog",
    "Calls waiting for the interceptor's writer threads: rows to write ahead ('ahead') and "
    "answers to record ('completions'), as of each thread's last batch.",
    ["queue"], multiprocess_mode="livesum",
)  # fmt: skip
OTEL_DROPPED = Counter(
    "evalhub_otel_spans_dropped",
    "OpenTelemetry spans dropped: the export queue was full, or the collector refused or "
    "never answered an export.",
    ["reason"],
)

_models: set[str] = set()
# (metric, *its labels) -> its child: a dictionary look-up per use, no lock, where `labels`
# validates, locks and looks up (2% of a busy runner's loop). Bounded: callers' words (model
# names) never grow it for ever; past the bound a child is looked up each time.
_children: dict[tuple, Any] = {}
MAX_CHILDREN = 4 * MAX_MODELS + 64


def _child(metric, *labels, make=None):
    """`metric`'s child of `labels`, made by `make()` (else `metric.labels(*labels)`)."""
    key = (metric, *labels)
    child = _children.get(key)
    if child is None:
        child = make() if make is not None else metric.labels(*labels)
        if len(_children) < MAX_CHILDREN:
            _children[key] = child
    return child


def llm_call_count(
    *, provider: str, model: object, status: int | None, answered_by: str = "provider"
) -> None:
    """One recorded call (the interceptor's `submit`); `answered_by` is "provider",
    "recording" or "evalhub"."""
    labels = (provider, model if isinstance(model, str) else str(model or ""), status, answered_by)
    _child(LLM_CALLS, *labels, make=lambda: _call_counter(*labels)).inc()


def _call_counter(provider: str, model: str, status: int | None, answered_by: str) -> Counter:
    name = model[:100]
    if name not in _models:
        if len(_models) >= MAX_MODELS:
            name = OTHER
        else:
            _models.add(name)
    return LLM_CALLS.labels(provider, name, str(status) if status else "none", answered_by)


def interceptor_added_observe(seconds: float) -> None:
    INTERCEPTOR_ADDED.observe(max(0.0, seconds))


def rollout_started(*, kind: str) -> None:
    _child(ROLLOUTS_STARTED, kind).inc()
    _child(ROLLOUTS_IN_FLIGHT, kind).inc()


def rollout_ended(*, kind: str) -> None:
    _child(ROLLOUTS_IN_FLIGHT, kind).dec()


def writer_backlog_set(*, queue: str, size: int) -> None:
    _child(WRITER_BACKLOG, queue).set(size)


def otel_dropped(*, reason: str, spans: int) -> None:
    OTEL_DROPPED.labels(reason).inc(spans)


class HostsCollector(MultiProcessCollector):
    """prometheus_client's collector over the files of every host's folder."""

    def collect(self):
        return self.merge(readable_files(settings.EVALHUB_METRICS_DIR))


def readable_files(folder) -> list[str]:
    """The value files of every host's folder, but for those a process is creating right now:
    a file is empty until its process sizes it, and prometheus_client's merge raises on an
    empty one (a scrape beside a worker starting its first rollout answered 500)."""
    files = []
    for path in glob.glob(str(folder / "*" / "*.db")):
        try:
            if os.path.getsize(path) >= 8:
                files.append(path)
        except FileNotFoundError:  # a dead process's, dropped meanwhile
            continue
    return files


def registry_of_every_process() -> CollectorRegistry:
    """A registry for one scrape: every process's values added up."""
    registry = CollectorRegistry()
    HostsCollector(registry, path=str(settings.EVALHUB_METRICS_DIR))
    return registry


def dead_processes_forget() -> None:
    """Drop the gauges of this host's processes that are gone (a web process killed)."""
    for path in glob.glob(str(HOST_DIR / "gauge_live*_*.db")):
        pid = path.rsplit("_", 1)[-1].removesuffix(".db")
        if pid.isdigit() and not _alive(int(pid)):
            mark_process_dead(int(pid), str(HOST_DIR))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def host_files_clear() -> None:
    """Forget every value of this host's processes (`make run`'s start: none of them runs)."""
    shutil.rmtree(HOST_DIR, ignore_errors=True)
    HOST_DIR.mkdir(parents=True, exist_ok=True)
