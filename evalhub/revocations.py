"""Ended attempts, pushed to every web process: the moment a worker knows an attempt is over
(the task app answered, failed or timed out, the rollout was aborted, the job closed it) it says
so here, and each web process's interceptor closes that attempt's URL at once
(traces/interceptor/access.py) instead of at its next poll of the database, which stays as
the safety net for whatever a push misses.

The channel follows the deployment:

- with a Redis broker (REDIS_URL): pub/sub on `evalhub:ended:<queue>`. A publishing process
  hands the ids to a thread of its own, which sends them; its caller never waits on Redis.
- otherwise (the embedded default, every process on one machine): Unix datagrams, no server.
  Each web process binds a socket in `<EVALHUB_DATA_DIR>/revocation/<queue>/`; a publisher
  sends one datagram to every socket there without blocking, and removes the sockets nobody
  holds any more (a web process that died).

Publishing never raises and never waits: a channel that is down, or a receiver whose buffer is
full, loses the message, and the poll closes the URL within
EVALHUB_INTERCEPTOR_REVOCATION_POLL_S as before. A message is the attempt ids in ASCII,
separated by spaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import queue
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.db import transaction

from evalhub import heartbeats

log = logging.getLogger(__name__)

# Ids per message: a datagram stays far below the sockets' default buffers.
CHUNK = 1000
# The Redis publisher sends at most one message this often: under load the ids that end
# meanwhile go together in the next, where a PUBLISH per rollout was 5-10% of a busy worker's
# CPU; an attempt's end waits at most this long more to be pushed (idle, none at all).
REDIS_EVERY_S = 0.005
# After Redis failed, what is published for this long is dropped without trying (the poll
# closes those URLs), so a Redis that is down costs one timeout a second, not one per message.
REDIS_PAUSE_S = 1.0
# A socket's path must fit in sun_path (108 bytes on Linux, 104 on macOS); its own name,
# `/<pid>-<8 hex digits>.sock`, takes up to SOCKET_NAME_MAX of it.
SOCKET_PATH_MAX = 100
SOCKET_NAME_MAX = 24
RECEIVE_BUFFER_BYTES = 1 << 20


def publish(attempt_ids: Iterable[int]) -> None:
    """Tell every web process these attempts have ended: fire and forget, at once."""
    ids = [int(i) for i in attempt_ids]
    if not ids:
        return
    try:
        _publisher().send(ids)
    except Exception:  # never the caller's failure: the poll closes the URLs
        log.debug("publishing ended attempts failed", exc_info=True)


def publish_on_commit(attempt_ids: Iterable[int]) -> None:
    """`publish` once the current transaction commits (nothing if it rolls back)."""
    ids = list(attempt_ids)
    if ids:
        transaction.on_commit(lambda: publish(ids))


def channel() -> str:
    return f"evalhub:ended:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def folder() -> Path:
    """Where the web processes of this deployment bind their sockets; a short folder of the
    temporary directory, named after it, when that path is too long for a socket."""
    where = settings.DATA_DIR / "revocation" / settings.CELERY_TASK_DEFAULT_QUEUE
    if len(str(where)) + SOCKET_NAME_MAX > SOCKET_PATH_MAX:
        digest = hashlib.sha256(str(where).encode()).hexdigest()[:16]
        where = Path(tempfile.gettempdir()) / f"evalhub-revocation-{digest}"
    return where


def encode(ids: list[int]) -> Iterator[bytes]:
    for start in range(0, len(ids), CHUNK):
        yield " ".join(map(str, ids[start : start + CHUNK])).encode()


def decode(message: bytes) -> list[int]:
    return [int(part) for part in message.split() if part.isdigit()]


class DatagramPublisher:
    def __init__(self) -> None:
        self.folder = folder()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)

    def send(self, ids: list[int]) -> None:
        try:
            paths = [e.path for e in os.scandir(self.folder) if e.name.endswith(".sock")]
        except OSError:  # no web process has bound a socket yet
            return
        for message in encode(ids):
            for path in list(paths):
                try:
                    self.sock.sendto(message, path)
                except (ConnectionRefusedError, FileNotFoundError):
                    # Nobody holds it: its web process died. Ours to remove.
                    paths.remove(path)
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                except OSError:  # its buffer is full: lost, the poll covers it
                    continue


class RedisPublisher:
    """A thread sends what `send` queues, everything queued meanwhile in one go."""

    def __init__(self, url: str) -> None:
        self.client = heartbeats.redis_client(url)
        self.channel = channel()
        self.pending: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="evalhub-revocations", daemon=True).start()

    def send(self, ids: list[int]) -> None:
        self.pending.put(ids)

    def _run(self) -> None:
        paused_until = sent_at = 0.0
        while True:
            ids = self.pending.get()
            if (wait := sent_at + REDIS_EVERY_S - time.monotonic()) > 0:
                time.sleep(wait)
            with contextlib.suppress(queue.Empty):
                while True:
                    ids.extend(self.pending.get_nowait())
            if time.monotonic() < paused_until:
                continue
            sent_at = time.monotonic()
            try:
                for message in encode(ids):
                    self.client.publish(self.channel, message)
            except (redis.RedisError, OSError):
                paused_until = time.monotonic() + REDIS_PAUSE_S


_publishers: dict[tuple, DatagramPublisher | RedisPublisher] = {}
_publishers_lock = threading.Lock()


def _publisher() -> DatagramPublisher | RedisPublisher:
    """This process's publisher for the channel the settings name (a forked child makes its
    own)."""
    url = heartbeats.redis_url()
    key = (os.getpid(), url, channel() if url else folder())
    found = _publishers.get(key)
    if found is None:
        with _publishers_lock:
            found = _publishers.get(key)
            if found is None:
                found = RedisPublisher(url) if url else DatagramPublisher()
                _publishers[key] = found
    return found


class Subscriber:
    """A web process's end of the channel: `on_ended(ids)` runs on its event loop as each
    message arrives, from `start()` until `close()`."""

    def __init__(self, on_ended: Callable[[list[int]], None]):
        self.on_ended = on_ended
        self._sock: socket.socket | None = None
        self._path: Path | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Subscribe; call it on the running event loop. A channel that cannot be opened is
        logged, not raised: the poll closes URLs without it."""
        url = heartbeats.redis_url()
        if url:
            self._task = asyncio.get_running_loop().create_task(self._redis(url))
            return
        try:
            self._bind()
        except OSError:
            log.warning("ended attempts are not pushed to this process", exc_info=True)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def _bind(self) -> None:
        where = folder()
        # Only this deployment's user may send: a datagram there closes a rollout's URL.
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = where / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
        sock.bind(str(path))
        self._sock, self._path = sock, path
        asyncio.get_running_loop().add_reader(sock.fileno(), self._drain)

    def _drain(self) -> None:
        while self._sock is not None:
            try:
                message = self._sock.recv(65536)
            except OSError:  # nothing more for now
                return
            self._deliver(message)

    def _deliver(self, message: bytes) -> None:
        try:
            self.on_ended(decode(message))
        except Exception:  # a bad message never stops the channel
            log.exception("an ended-attempts message could not be handled")

    async def _redis(self, url: str) -> None:
        """Listen, and listen again a second after Redis went away (said once per outage)."""
        down = False
        while True:
            client = aioredis.Redis.from_url(
                url, socket_connect_timeout=heartbeats.REDIS_TIMEOUT_S, socket_keepalive=True,
                health_check_interval=10,
            )  # fmt: skip
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(channel())
                    if down:
                        log.warning("the ended-attempts channel in Redis is back")
                    down = False
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=5.0
                        )
                        if message is not None and message["type"] == "message":
                            self._deliver(message["data"])
            except (redis.RedisError, OSError):
                if not down:
                    log.warning("the ended-attempts channel in Redis is down; the poll closes URLs")
                down = True
            finally:
                await client.aclose()
            await asyncio.sleep(1.0)
