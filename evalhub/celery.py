"""The Celery app. Configuration comes from Django settings (the CELERY_ namespace).

Two worker bootsteps keep a worker honest about consuming:

- `Heartbeat` (consumer): from the consumer's own event loop, writes the worker's heartbeat
  (evalhub.heartbeats) every few seconds; /healthz counts the workers whose heartbeat is fresh.
- `Watchdog` (worker): a worker that can no longer consume exits, so that its supervisor
  (`make run`'s runner, the compose restart policy) starts a fresh one. Two cases: the worker is
  stopping after an unrecoverable error (Celery 5.7.0 after a Redis restart) but its shutdown
  does not finish; or its consumer loop has not run for STALL_S although the broker answers.
  A stopping worker *drains* first (`DRAIN`): its job runners need only the database, so they
  finish their slices, keep their rollouts and hand their jobs back to the queue
  (jobs/worker/runner.py), while the watchdog keeps its heartbeat (marked draining) so that
  nobody takes its leases for a dead worker's; it exits FATAL_EXIT_GRACE_S after the error once
  no runner is left, and at the latest EVALHUB_WORKER_DRAIN_S after it. Exiting is safe at any
  point: the database is the source of truth, leases end and Celery beat hands the job out again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from celery import Celery, bootsteps
from django.conf import settings

from evalhub.heap import startup_heap_freeze
from evalhub.heartbeats import HEARTBEAT_S, HeartbeatWriter, worker_id

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")

log = logging.getLogger("evalhub.worker")

# A worker stopping after an unrecoverable error exits at the latest this long after.
FATAL_EXIT_GRACE_S = 10.0
# A consumer loop that has not run this long while the broker answers is stuck: exit. Longer
# than the longest wait between two reconnection tries of Celery (32 s).
STALL_S = 90.0
WATCH_S = 1.0

# Redis connections that notice a dead peer: TCP keepalive, a health check before a connection
# idle this long is reused, a bounded connect. (No socket_timeout: the consumer blocks on BRPOP.)
REDIS_TRANSPORT_OPTIONS = {
    "socket_keepalive": True,
    "health_check_interval": 10,
    "socket_connect_timeout": 5,
    "retry_on_timeout": True,
}


def _redis_transport_options(sender, source, **kwargs) -> None:
    if str(source.broker_url or "").startswith(("redis://", "rediss://")):
        given = dict(source.broker_transport_options or {})
        # The CELERY_-prefixed key (from Django settings) wins over the plain one.
        source["CELERY_BROKER_TRANSPORT_OPTIONS"] = {**REDIS_TRANSPORT_OPTIONS, **given}


app = Celery("evalhub")
app.on_after_configure.connect(_redis_transport_options, weak=False)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class Drain:
    """The job runners of this worker process, and whether it is draining (it lost its
    consumer: its runners end their slices, take no more, and hand their jobs back)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.running = 0
        self.stopping = threading.Event()

    @contextlib.contextmanager
    def runner(self):
        with self._lock:
            self.running += 1
        try:
            yield
        finally:
            with self._lock:
                self.running -= 1


DRAIN = Drain()


class Liveness:
    """What the watchdog knows of its worker: when the consumer loop last ran, and whether the
    worker is stopping with an error. Decisions take the clock as an argument (tests)."""

    def __init__(
        self, *, stall_s: float = STALL_S, grace_s: float = FATAL_EXIT_GRACE_S, drain_s: float = 0
    ):
        self.stall_s = stall_s
        self.grace_s = grace_s
        self.drain_s = max(drain_s, grace_s)
        self.last_tick: float | None = None
        self.fatal_since: float | None = None
        self.exitcode = 1

    def tick(self, now: float) -> None:
        self.last_tick = now

    def fatal(self, now: float, exitcode: int) -> None:
        if self.fatal_since is None:
            self.fatal_since = now
            self.exitcode = exitcode or 1

    def verdict(self, now: float, broker_answers, runners: int = 0) -> str | None:
        """Why the worker must exit now, or None. `broker_answers` is only called when the
        consumer looks stuck (it costs a round trip); `runners` are the job runners still
        draining."""
        if self.fatal_since is not None:
            waited = now - self.fatal_since
            if waited >= self.drain_s:
                return f"still not stopped {self.drain_s:g}s after an unrecoverable error"
            if waited >= self.grace_s and runners == 0:
                return f"still not stopped {self.grace_s:g}s after an unrecoverable error"
        stuck = self.last_tick is not None and now - self.last_tick >= self.stall_s
        if stuck and broker_answers():
            return f"the consumer has not run for {now - self.last_tick:.0f}s; the broker answers"
        return None


class Heartbeat(bootsteps.StartStopStep):
    """Consumer step: the heartbeat, written from the consumer's event loop."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.tref = None

    def start(self, c):
        liveness: Liveness = c.controller.evalhub_liveness
        writer: HeartbeatWriter = c.controller.evalhub_heartbeats

        def beat():
            liveness.tick(time.monotonic())
            writer.beat()

        if self.tref is not None:
            self.tref.cancel()
        beat()
        self.tref = c.timer.call_repeatedly(HEARTBEAT_S, beat)

    def stop(self, c):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    shutdown = stop


class Watchdog(bootsteps.StartStopStep):
    """Worker step: exits the process when the worker can no longer consume (see above)."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        worker.evalhub_liveness = Liveness(drain_s=settings.EVALHUB_WORKER_DRAIN_S)
        worker.evalhub_heartbeats = HeartbeatWriter(
            worker_id(), counts_others=lambda: DRAIN.running > 0
        )

    def start(self, worker):
        worker.evalhub_heartbeats.worker = worker_id(worker.hostname)
        # The worker's modules and app, out of the collector's way; young collections rarer.
        startup_heap_freeze(young_threshold=settings.EVALHUB_WORKER_GC_GEN0)
        thread = threading.Thread(
            target=self._watch, args=(worker,), name="evalhub-watchdog", daemon=True
        )
        thread.start()

    def _watch(self, worker) -> None:
        liveness: Liveness = worker.evalhub_liveness
        writer: HeartbeatWriter = worker.evalhub_heartbeats
        last_beat = 0.0
        while True:
            time.sleep(WATCH_S)
            now = time.monotonic()
            if DRAIN.stopping.is_set() and now - last_beat >= HEARTBEAT_S:
                writer.beat()  # the consumer's beat stopped: its runners' leases are alive
                last_beat = now
            reason = liveness.verdict(now, lambda: _broker_answers(writer), DRAIN.running)
            if reason:
                log.critical("worker %s exits: %s", writer.worker, reason)
                logging.shutdown()
                os._exit(liveness.exitcode)

    def stop(self, worker):
        if worker.exitcode not in (None, 0) and DRAIN.running:  # an unrecoverable error
            worker.evalhub_liveness.fatal(time.monotonic(), worker.exitcode)
            worker.evalhub_heartbeats.draining = True
            DRAIN.stopping.set()
            log.warning("worker lost its consumer; draining %d job runners", DRAIN.running)
            return
        if worker.exitcode not in (None, 0):
            worker.evalhub_liveness.fatal(time.monotonic(), worker.exitcode)
        worker.evalhub_heartbeats.clear()

    shutdown = stop


def _broker_answers(writer: HeartbeatWriter) -> bool:
    if writer.client is None:  # no Redis (file-system broker): the loop is the only sign
        return True
    try:
        return bool(writer.client.ping())
    except Exception:
        return False


app.steps["worker"].add(Watchdog)
app.steps["consumer"].add(Heartbeat)
