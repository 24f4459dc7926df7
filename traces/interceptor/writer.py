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
call that never reached a provider) with whatever is queued by then and, while other calls
are in flight, those answered within `_COMPLETIONS_GATHER_S` of the first: a lone caller's
call is saved at once (its next call's row, written ahead, would wait for a late save on
SQLite), and under load calls share a save. The caller has its answer already: what waits is
its row, not the caller. Saved as they came, at 8 and 32 callers a save held 1.3 calls on
average, and a save's statements and transaction cost the web process several calls' rows
(`bench/bench_call_rows.py`). Answers still queued when the process is killed (SIGKILL) leave
their rows in flight; a normal stop flushes them (the ASGI lifespan's shutdown).

On SQLite (the embedded default) the two threads take turns on a lock of ours for their
transactions (`_SQLITE_TURNS`), and only the completions' thread checkpoints the write-ahead
log, outside its turn (`_Checkpoints`). A call waiting for its row then never waits for a
checkpoint (it copies the log into the database and syncs the file: 3-5 ms), nor sleeps in
SQLite's busy handler (1 ms, then 2, then 5) while the other thread commits: those were the
slowest 1% of the calls at one caller (docs/performance.md)."""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connection

from evalhub import metrics
from traces.calls import recording as services
from traces.interceptor.errors import InterceptorError

log = logging.getLogger(__name__)

_BATCH = 200
_TRIES = 3
# Answered calls that arrive this soon after the first of a save share it (see above).
_COMPLETIONS_GATHER_S = 0.005

# SQLite: one writer thread's transaction at a time (see the module's docstring).
_SQLITE_TURNS = threading.Lock()
# SQLite: rows written between two checkpoints, as SQLite's own 1,000 pages of log hold.
_CHECKPOINT_ROWS = 200


class _Queue:
    """A queue of the C `SimpleQueue` (a put takes no lock of Python's and notifies no
    Condition, which `queue.Queue`'s put did on the event loop's thread: about 7% of a web
    process's busy samples at 32 callers) and counters of what was put (by the event loop's
    thread) and what was done with (by the writer's), which `flush` reads."""

    def __init__(self) -> None:
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.put = 0
        self.done = 0

    def put_nowait(self, item) -> None:
        self.put += 1
        self.items.put_nowait(item)

    def drain(self) -> list:
        """The next item, and whatever queued meanwhile (up to _BATCH): they share one save,
        whose transaction and statements cost little more than a lone call's. Nothing waits
        for more."""
        items: list = []
        self.gather(0.0, items.append, lambda: False)
        return items

    def gather(self, within_s: float, each: Callable, more_coming: Callable[[], bool]) -> None:
        """Wait for the next item and hand it to `each`, then every item queued meanwhile and,
        while `more_coming()`, those that arrive within `within_s` of it (up to _BATCH in all),
        each as it comes."""
        each(self.items.get())
        deadline = time.monotonic() + within_s
        for _ in range(_BATCH - 1):
            try:
                item = self.items.get_nowait()
            except queue.Empty:
                if not more_coming() or (wait := deadline - time.monotonic()) <= 0:
                    return
                try:
                    item = self.items.get(timeout=wait)
                except queue.Empty:
                    return
            each(item)

    def pending(self) -> int:
        return self.put - self.done


class CallWriter:
    def __init__(self, on_built: Callable | None = None):
        self._queue = _Queue()  # answered calls (records)
        self._ahead = _Queue()  # calls waiting for their row: (record, future, loop)
        self._started = False
        self._lock = threading.Lock()
        self._on_built = on_built
        self._checkpoints = _Checkpoints()
        # Calls forwarded and not answered yet (each try written ahead and not submitted):
        # counted on the event loop's thread, read by the completions' to know more will come.
        self.in_flight = 0

    async def ahead(self, record: services.CallRecord) -> None:
        """Return once the call's row is in the database, in flight (`record.row_id`); 503
        when it cannot be written: then the call must not be forwarded."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._start()
        self._ahead.put_nowait((record, future, loop))
        self.in_flight += 1
        try:
            row_id = await future
        except BaseException:  # the caller went: it will not be answered
            self.in_flight -= 1
            raise
        if row_id is None:
            self.in_flight -= 1
            raise InterceptorError(
                503, "service_unavailable", "The interceptor cannot record the call."
            )
        record.row_id = row_id

    def submit(self, record: services.CallRecord) -> None:
        """Record an answered (or refused) call: its row written ahead is completed."""
        self._start()
        if record.row_id is not None:  # answered (or failed) after its row was written ahead
            self.in_flight -= 1
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
        while (self._queue.pending() or self._ahead.pending()) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _run(self) -> None:
        while True:
            records: list = []
            calls: list = []
            take = functools.partial(self._take, calls=calls, taken=records)
            try:
                self._queue.gather(_COMPLETIONS_GATHER_S, take, lambda: self.in_flight > 0)
                metrics.writer_backlog_set(queue="completions", size=self._queue.items.qsize())
                self._save(services.llm_calls_save, calls)
                self._checkpoints.due()
            finally:
                self._queue.done += len(records)

    def _run_ahead(self) -> None:
        while True:
            waiting = self._ahead.drain()
            metrics.writer_backlog_set(queue="ahead", size=self._ahead.items.qsize())
            try:
                self._write_ahead(waiting)
            finally:
                self._ahead.done += len(waiting)

    def _write_ahead(self, waiting: list[tuple]) -> None:
        """Insert the rows of the calls waiting to be forwarded and let them go: each with its
        row's id, or None when it could not be written (one wake-up of their event loop)."""
        rows = []
        for record, _, _ in waiting:
            try:
                rows.append(services.llm_call_ahead(record=record))
            except Exception:
                log.exception("could not write ahead a call of attempt %s", record.attempt_id)
                rows.append(None)
        try:
            # A row has its id once it is committed (each statement commits as it runs).
            self._save(services.llm_calls_ahead_save, [row for row in rows if row is not None])
        finally:
            by_loop: dict = {}
            for (_, future, loop), row in zip(waiting, rows, strict=True):
                pk = row.pk if row is not None else None
                by_loop.setdefault(loop, []).append((future, pk))
            for loop, resolved in by_loop.items():
                loop.call_soon_threadsafe(_resolve, resolved)

    def _take(self, record: services.CallRecord, calls: list, taken: list) -> None:
        """Read the record's usage and count its spending at once (budgets and rollout limits
        see it before the row becomes visible); its row goes in `calls`, itself in `taken`."""
        taken.append(record)
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


def _resolve(resolved: list[tuple[asyncio.Future, int | None]]) -> None:
    for future, row_id in resolved:
        if not future.done():  # the caller may have gone (its task cancelled)
            future.set_result(row_id)
