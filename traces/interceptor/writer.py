"""The writer thread: call records are saved in batches, so the event loop never waits on the
database. Each record's usage and cost are read, and counted against budgets and rollout
limits, as soon as it arrives. Its row is saved at once, with whatever else is queued by then
(group commit): a lone call is never held back waiting for company, and under load the calls
that finish while one save runs share the next. Records still queued when the process is
killed (SIGKILL) are lost; a normal stop flushes them (the ASGI lifespan's shutdown)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connection

from traces import services

log = logging.getLogger(__name__)

_BATCH = 200


class CallWriter:
    def __init__(self, on_built: Callable | None = None):
        self._queue: queue.Queue[services.CallRecord] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._on_built = on_built

    def submit(self, record: services.CallRecord) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="interceptor-writer", daemon=True
                    )
                    self._thread.start()
        self._queue.put_nowait(record)

    def flush(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)

    def _run(self) -> None:
        while True:
            records: list[services.CallRecord] = []
            calls: list = []
            self._take(self._queue.get(), records, calls)
            # Whatever queued meanwhile shares this save: a batch's transaction, numbering and
            # insert cost little more than a lone call's. Nothing waits for more to arrive: a
            # worker that sees its rollout end reads the calls a moment later.
            while len(records) < _BATCH:
                try:
                    self._take(self._queue.get_nowait(), records, calls)
                except queue.Empty:
                    break
            try:
                self._save(calls)
            finally:
                for _ in records:
                    self._queue.task_done()

    def _take(self, record: services.CallRecord, records: list, calls: list) -> None:
        """Read the record's usage and count its spending at once (budgets and rollout limits
        see it before the row becomes visible)."""
        records.append(record)
        try:
            built = [services.llm_call_build(record=record)]
        except Exception:
            log.exception("could not read an LLM call of attempt %s", record.attempt_id)
            built = []
        if self._on_built:
            self._on_built([record], built)
        calls.extend(built)

    def _save(self, calls: list) -> None:
        if not calls:
            return
        for try_ in range(3):
            try:
                services.llm_calls_save(calls=calls)
                return
            except Exception:
                log.exception("saving %d LLM call(s) failed (try %d)", len(calls), try_ + 1)
                connection.close()  # a broken connection is reopened on the next try
                time.sleep(0.5 * (try_ + 1))
