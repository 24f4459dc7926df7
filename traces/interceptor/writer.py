"""The writer thread: call records are saved in batches, so the event loop never waits on the
database. Records still queued when the process is killed (SIGKILL) are lost; a normal stop
flushes them (the ASGI lifespan's shutdown)."""

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
            # No linger: calls that finish while a batch is being saved share the next one, and
            # a lone call is counted against its job's budget at once.
            batch = [self._queue.get()]
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._save(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _save(self, batch: list[services.CallRecord]) -> None:
        calls = []
        for record in batch:
            try:
                calls.append(services.llm_call_build(record=record))
            except Exception:
                log.exception("could not read an LLM call of attempt %s", record.attempt_id)
        # Count the spending before the rows become visible, so that a call that sees a
        # recorded row also sees its cost in the budget.
        if self._on_built:
            self._on_built(batch, calls)
        for try_ in range(3):
            try:
                services.llm_calls_save(calls=calls)
                return
            except Exception:
                log.exception("saving %d LLM call(s) failed (try %d)", len(calls), try_ + 1)
                connection.close()  # a broken connection is reopened on the next try
                time.sleep(0.5 * (try_ + 1))
