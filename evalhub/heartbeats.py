"""Worker heartbeats: each worker's consumer writes one while it consumes; /healthz reads them.

A heartbeat is written from the consumer's own event loop (evalhub.celery), so it stops when the
worker stops consuming, even if the process is still alive. It lives beside the queue: a field
of one Redis hash per queue (`evalhub:heartbeats:<queue>`, the worker's name to its record,
which says when it was written), or a file in the file-system broker's folder for the embedded
default. Reading them all is one HGETALL with short timeouts, whatever else the Redis holds (a
scan for keys by pattern walked its whole keyspace), so /healthz answers quickly even when the
broker is down; a record (field or file) not rewritten for PRUNE_AFTER_S is removed by whoever
reads it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import redis
from django.conf import settings

# A consuming worker writes every HEARTBEAT_S; one not seen for HEARTBEAT_TTL_S is not consuming.
HEARTBEAT_S = 2.0
HEARTBEAT_TTL_S = 10.0
# Redis calls made for heartbeats never wait longer than this.
REDIS_TIMEOUT_S = 0.5
# A record this old is a worker long gone (stopped without clearing it: killed, its host lost):
# it is deleted as it is read, well past HEARTBEAT_TTL_S, so that a worker that beats
# again meanwhile was already taken for gone.
PRUNE_AFTER_S = 60.0


def redis_url() -> str | None:
    url = settings.CELERY_BROKER_URL
    return url if url.startswith(("redis://", "rediss://")) else None


def _hash_key() -> str:
    return f"evalhub:heartbeats:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def _since_key() -> str:
    """When the heartbeats in Redis began (set by the first beat into an empty Redis): a Redis
    restarted without persistence forgets every heartbeat at once, and nobody may be taken for
    dead until the workers have had the time to beat again."""
    return f"evalhub:heartbeats-since:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def _folder() -> Path:
    return settings.DATA_DIR / "broker" / "heartbeats"


def supported() -> bool:
    """Heartbeats are kept with a Redis broker and with the file-system one."""
    return redis_url() is not None or settings.CELERY_BROKER_URL == "filesystem://"


def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=REDIS_TIMEOUT_S,
        socket_timeout=REDIS_TIMEOUT_S,
        retry_on_timeout=False,
    )


# What else a worker process reports with its heartbeat, by name (e.g. traces.otel.export's
# span counts): each is called at every beat and must be cheap and never raise.
_reporters: dict[str, Callable[[], dict]] = {}


def reporter(name: str, report: Callable[[], dict]) -> None:
    """Report `report()` under `name` in this process's heartbeats (and so on /healthz)."""
    _reporters[name] = report


class HeartbeatWriter:
    """One per worker process; `beat()` is cheap and never raises."""

    def __init__(self, worker: str, *, counts_others: Callable[[], bool] | None = None):
        self.worker = worker
        # Whether a beat keeps `others_consuming`: the worker process's own writer does while
        # its job runners run, the only time the count is read (evalhub.celery), so an idle
        # worker reads no heartbeat. None: a writer for another worker (a test's stand-in),
        # which never counts and is not this process's.
        self.counts_others = counts_others
        self.url = redis_url()
        self.client = redis_client(self.url) if self.url else None
        self.last_ok: float | None = None
        # No longer consuming, its runners finishing their slices (evalhub.celery.Drain).
        self.draining = False

    def beat(self) -> bool:
        extra = {name: report() for name, report in _reporters.items()}
        record = json.dumps({"worker": self.worker, "host": socket.gethostname(),
                             "pid": os.getpid(), "at": time.time(),
                             "draining": self.draining, **extra})  # fmt: skip
        try:
            if self.client is not None:
                pipe = self.client.pipeline(transaction=False)
                pipe.hset(_hash_key(), self.worker, record)
                pipe.set(_since_key(), time.time(), nx=True)
                pipe.execute()
            elif settings.CELERY_BROKER_URL == "filesystem://":
                folder = _folder()
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{self.worker}.json").write_text(record)
        except (redis.RedisError, OSError):
            return False
        self.last_ok = time.monotonic()
        if self.counts_others is not None:
            global _own_worker
            _own_worker = self.worker
            if self.counts_others():
                self._others_count()
        return True

    def _others_count(self) -> None:
        """Keep how many other live workers take messages (`others_consuming`), read on this
        writer's own connection once a beat: runners ask it per hand and per claim that fills,
        where a read of their own took a new connection each time."""
        global _others_seen
        try:
            live = _live(_records(self.client))
        except (redis.RedisError, OSError, ValueError):
            return
        _others_seen = (time.monotonic(), _others(live, self.worker))

    def clear(self) -> None:
        try:
            _forget(self.client, [self.worker])
        except (redis.RedisError, OSError):
            pass


# A heartbeat's own fields; any other is what a `reporter` added.
_OWN_FIELDS = ("worker", "host", "pid", "at", "draining")


# How many other live workers took messages as this process's last beat saw them, and when
# (`HeartbeatWriter._others_count`); None in a process that writes no heartbeat. And the
# name this process's own writer beats under (None before its first beat, and in the web).
_others_seen: tuple[float, int] | None = None
_own_worker: str | None = None


def others_consuming() -> int:
    """How many live workers besides this one take messages (a draining one takes none): as
    this process's last heartbeat saw them, when it beat within two HEARTBEAT_S (a worker
    started since is counted at the next beat); else read now.
    Raises when the heartbeats cannot be read (the broker is down)."""
    seen = _others_seen
    if seen is not None and time.monotonic() - seen[0] <= 2 * HEARTBEAT_S:
        return seen[1]
    return _others(live_workers(), _own_worker)


def _others(live: list[dict], worker: str | None) -> int:
    """Of the `live` workers, those that take messages other than `worker` (this process's);
    with no name (this process has not beaten), it is taken for one of them."""
    taking = [w["worker"] for w in live if not w["draining"]]
    if worker is None:
        return max(0, len(taking) - 1)
    return sum(name != worker for name in taking)


def live_workers() -> list[dict]:
    """The workers seen within HEARTBEAT_TTL_S: `worker` (its node name), `host`, `pid`,
    `seen_s_ago`, `draining` (alive, no longer consuming, its runners finishing), and what its
    process reports beside (e.g. `otel`).
    Raises when the heartbeats cannot be read (the broker is down)."""
    url = redis_url()
    client = redis_client(url) if url else None
    try:
        return _live(_records(client))
    finally:
        if client is not None:
            client.close()


def _records(client: redis.Redis | None) -> list[dict]:
    """Every heartbeat kept, through `client` with Redis, else from the broker's folder; those
    not rewritten for PRUNE_AFTER_S are deleted as they are read."""
    records: list[dict] = []
    if client is not None:
        records = [json.loads(v) for v in client.hgetall(_hash_key()).values()]
    elif settings.CELERY_BROKER_URL == "filesystem://" and _folder().is_dir():
        for path in _folder().glob("*.json"):
            try:
                records.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
    now = time.time()
    if gone := [r["worker"] for r in records if now - r["at"] > PRUNE_AFTER_S]:
        _forget(client, gone)
    return records


def _forget(client: redis.Redis | None, workers: list[str]) -> None:
    """Delete these workers' heartbeats: their fields of the hash, or their files."""
    if client is not None:
        client.hdel(_hash_key(), *workers)
    elif settings.CELERY_BROKER_URL == "filesystem://":
        for worker in workers:
            (_folder() / f"{worker}.json").unlink(missing_ok=True)


def _live(records: list[dict]) -> list[dict]:
    """The `records` seen within HEARTBEAT_TTL_S, by worker, as `live_workers` has them."""
    now = time.time()
    live = [
        {
            "worker": r["worker"],
            "host": r.get("host", ""),
            "pid": r["pid"],
            "seen_s_ago": round(max(0.0, now - r["at"]), 1),
            "draining": bool(r.get("draining")),
            **{name: value for name, value in r.items() if name not in _OWN_FIELDS},
        }  # fmt: skip
        for r in records
        if now - r["at"] <= HEARTBEAT_TTL_S
    ]
    return sorted(live, key=lambda r: r["worker"])


def live_processes(*, within_s: float) -> set[str] | None:
    """The worker processes ("host:pid") seen within `within_s`, consuming or draining (their
    runners hold leases still); None when that cannot be known (no heartbeats on this broker, or they cannot be read): then nobody may
    be taken for dead."""
    if not supported():
        return None
    try:
        if not _kept_for(within_s):
            return None
        live = live_workers()
    except Exception:  # the broker is down: not a sign that any worker is
        return None
    return {f"{w['host']}:{w['pid']}" for w in live if w["seen_s_ago"] <= within_s}


def _kept_for(seconds: float) -> bool:
    """Whether the heartbeats have been kept for `seconds` (always, in files)."""
    url = redis_url()
    if not url:
        return True
    client = redis_client(url)
    try:
        since = client.get(_since_key())
    finally:
        client.close()
    return since is not None and time.time() - float(since) >= seconds


def worker_id(hostname: str | None = None) -> str:
    return hostname or f"{socket.gethostname()}:{os.getpid()}"
