"""The writer threads: every call's row is written by them, so the event loop never waits on the
database, except for the one thing a call must wait for: its row written ahead.

A call about to be forwarded waits until its row is in the database, in flight (`ahead`), so a
call that reached a provider always leaves a row, even if the process is killed while the
answer is on its way (that row is then marked lost with its usage unknown: see
`traces.calls.recording.llm_calls_lost_mark`). A thread of its own writes them ahead, all that
queued while it was busy in one transaction (group commit), so they never wait behind the
completions of other calls.

Answered calls (`submit`) have their usage and cost read, and counted against budgets and
rollout limits, as soon as they arrive; their rows are completed in place (or inserted, for a
call that never reached a provider) at once, with whatever else is queued by then: a lone call
is never held back waiting for company, and under load the calls that finish while one save
runs share the next. Answers still queued when the process is killed (SIGKILL) leave their
rows in flight; a normal stop flushes them (the ASGI lifespan's shutdown).

On SQLite (the embedded default) the two threads take turns on a lock of ours for their
transactions (`_SQLITE_TURNS`), and only the completions' thread checkpoints the write-ahead
log, outside its turn (`_Checkpoints`). A call waiting for its row then never waits for a
checkpoint (it copies the log into the database and syncs the file: 3-5 ms), nor sleeps in
SQLite's busy handler (1 ms, then 2, then 5) while the other thread commits: those were the
slowest 1% of the calls at one caller (docs/performance.md)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection

from evalhub import metrics
from traces.calls import recording as services
from traces.interceptor.errors import InterceptorError

log = logging.getLogger(__name__)

_BATCH = 200
_TRIES = 3

# SQLite: one writer thread's transaction at a time (see the module's docstring).
_SQLITE_TURNS = threading.Lock()
# SQLite: rows written between two checkpoints, as SQLite's own 1,000 pages of log hold.
_CHECKPOINT_ROWS = 200


@dataclass(frozen=True)
class _Ahead:
    """A call waiting for its row to be written ahead."""

    record: services.CallRecord
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class CallWriter:
    def __init__(self, on_built: Callable | None = None):
        self._queue: queue.Queue[services.CallRecord] = queue.Queue()
        self._ahead: queue.Queue[_Ahead] = queue.Queue()
        self._started = False
        self._lock = threading.Lock()
        self._on_built = on_built
        self._checkpoints = _Checkpoints()

    async def ahead(self, record: services.CallRecord) -> None:
        """Return once the call's row is in the database, in flight (`record.row_id`); 503
        when it cannot be written: then the call must not be forwarded."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._start()
        self._ahead.put_nowait(_Ahead(record, future, loop))
        row_id = await future
        if row_id is None:
            raise InterceptorError(
                503, "service_unavailable", "The interceptor cannot record the call."
            )
        record.row_id = row_id

    def submit(self, record: services.CallRecord) -> None:
        """Record an answered (or refused) call: its row written ahead is completed."""
        self._start()
        self._queue.put_nowait(record)

    def _start(self) -> None:
        """Two threads, so a call waiting for its row never waits behind the completions."""
        if self._started:
            return
        with self._lock:
            if not self._started:
                for target, name in ((self._run, "interceptor-writer"),
                                     (self._run_ahead, "interceptor-ahead")):  # fmt: skip
                    threading.Thread(target=target, name=name, daemon=True).start()
                self._started = True

    def flush(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while (
            self._queue.unfinished_tasks or self._ahead.unfinished_tasks
        ) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _run(self) -> None:
        while True:
            records = _drain(self._queue)
            metrics.writer_backlog_set(queue="completions", size=self._queue.qsize())
            try:
                calls: list = []
                for record in records:
                    self._take(record, calls)
                self._save(services.llm_calls_save, calls)
                self._checkpoints.due()
            finally:
                for _ in records:
                    self._queue.task_done()

    def _run_ahead(self) -> None:
        while True:
            waiting = _drain(self._ahead)
            metrics.writer_backlog_set(queue="ahead", size=self._ahead.qsize())
            try:
                self._write_ahead(waiting)
            finally:
                for _ in waiting:
                    self._ahead.task_done()

    def _write_ahead(self, waiting: list[_Ahead]) -> None:
        """Insert the rows of the calls waiting to be forwarded and let them go: each with its
        row's id, or None when it could not be written."""
        if not waiting:
            return
        rows = []
        for item in waiting:
            try:
                rows.append(services.llm_call_ahead(record=item.record))
            except Exception:
                log.exception("could not write ahead a call of attempt %s", item.record.attempt_id)
                rows.append(None)
        # A row has its id once it is committed (each statement commits as it runs).
        self._save(services.llm_calls_ahead_save, [row for row in rows if row is not None])
        for item, row in zip(waiting, rows, strict=True):
            pk = row.pk if row is not None else None
            item.loop.call_soon_threadsafe(_resolve, item.future, pk)

    def _take(self, record: services.CallRecord, calls: list) -> None:
        """Read the record's usage and count its spending at once (budgets and rollout limits
        see it before the row becomes visible)."""
        try:
            built = [services.llm_call_build(record=record)]
        except Exception:
            log.exception("could not read an LLM call of attempt %s", record.attempt_id)
            built = []
        if self._on_built:
            self._on_built([record], built)
        calls.extend(built)

    def _save(self, save: Callable, calls: list) -> None:
        """`save(calls=...)`, tried _TRIES times (the rows it could not take, e.g. of an attempt
        since deleted, are left without an id)."""
        if not calls:
            return
        for try_ in range(_TRIES):
            try:
                if connection.vendor == "sqlite":
                    self._checkpoints.leave_to_us()
                    with _SQLITE_TURNS:
                        save(calls=calls)
                    self._checkpoints.rows += len(calls)
                else:
                    save(calls=calls)
                return
            except Exception:
                log.exception("saving %d LLM call(s) failed (try %d)", len(calls), try_ + 1)
                connection.close()  # a broken connection is reopened on the next try
                if try_ < _TRIES - 1:
                    time.sleep(0.5 * (try_ + 1))


class _Checkpoints:
    """SQLite: the writer threads' connections leave the write-ahead log's checkpoints to
    `due()`, which the completions' thread calls after each save: a passive checkpoint every
    _CHECKPOINT_ROWS rows written, which lets the other thread write meanwhile."""

    def __init__(self):
        self.rows = 0  # written since the last checkpoint, by both threads
        self.made = 0
        self._local = threading.local()

    def leave_to_us(self) -> None:
        """This thread's connection checkpoints no more by itself (set again on a new one)."""
        connection.ensure_connection()
        if getattr(self._local, "raw", None) is not connection.connection:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_autocheckpoint = 0")
            self._local.raw = connection.connection

    def due(self) -> None:
        if self.rows < _CHECKPOINT_ROWS or connection.vendor != "sqlite":
            return
        self.rows = 0
        try:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self.made += 1
        except Exception:  # the next one will do; the log only grows meanwhile
            log.exception("checkpointing the database's write-ahead log failed")


def _drain(q: queue.Queue) -> list:
    """The next item, and whatever queued meanwhile (up to _BATCH): they share one save, whose
    transaction and statements cost little more than a lone call's. Nothing waits for more."""
    items = [q.get()]
    while len(items) < _BATCH:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            break
    return items


def _resolve(future: asyncio.Future, row_id: int | None) -> None:
    if not future.done():  # the caller may have gone (its task cancelled)
        future.set_result(row_id)
