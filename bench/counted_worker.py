"""A Celery worker that counts its database statements by kind, for bench/bench_workers.py.

    python bench/counted_worker.py COUNTS.json -A evalhub worker ...

Runs `celery` with the given arguments after adding an execute wrapper to every database
connection the process opens: each statement (an `executemany` counts once: psycopg pipelines
it, one round trip) is counted under its verb and table, with the transactions committed, and
the wall time its thread spent in it (the round trip and the driver's work: where a batch of
results spends its time). The counts are written to COUNTS.json twice a second and as the
process exits.
"""

from __future__ import annotations

import atexit
import collections
import json
import re
import sys
import threading
import time
from pathlib import Path

_TABLE = re.compile(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', re.IGNORECASE)
counts: collections.Counter = collections.Counter()
spent: collections.Counter = collections.Counter()  # seconds, by the same kinds
lock = threading.Lock()


def kind(sql: str) -> str:
    verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
    if verb in ("SAVEPOINT", "RELEASE", "ROLLBACK"):
        return "SAVEPOINT/RELEASE"
    upper = sql.upper()
    if verb == "SELECT" and ("FOR UPDATE" in upper or "FOR NO KEY UPDATE" in upper):
        verb = "SELECT FOR UPDATE"
    table = _TABLE.search(sql)
    return f"{verb} {table.group(1) if table else ''}".strip()


def counter(execute, sql, params, many, context):
    name = kind(sql)
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        took = time.perf_counter() - started
        with lock:
            counts[name] += 1
            spent[name] += took


def install() -> None:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.signals import connection_created

    def created(sender, connection, **kwargs):
        if counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(counter)

    connection_created.connect(created, weak=False)
    commit = BaseDatabaseWrapper._commit

    def counted_commit(self):
        started = time.perf_counter()
        try:
            return commit(self)
        finally:
            took = time.perf_counter() - started
            with lock:
                counts["COMMIT"] += 1
                spent["COMMIT"] += took

    BaseDatabaseWrapper._commit = counted_commit


def write(path: Path) -> None:
    with lock:
        text = json.dumps({"counts": counts, "seconds": spent}, indent=1, sort_keys=True)
    path.write_text(text)


def main() -> None:
    path = Path(sys.argv[1])
    install()

    def loop():
        while True:
            time.sleep(0.5)
            write(path)

    threading.Thread(target=loop, daemon=True).start()
    atexit.register(write, path)
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[2:]]
    celery_main()


if __name__ == "__main__":
    main()
