"""Event streams hold no database connection of their own: 500 of them at once against a real
web process keep PostgreSQL's connection count bounded, still get their job's events, and the
count is back where it was once the clients are gone."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from urllib.parse import urlparse

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from jobs import services
from jobs.apikeys import api_key_create_for_username
from tests.support import servers

pytestmark = pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")),
    reason="counts PostgreSQL's connections (set DATABASE_URL to a PostgreSQL database)",
)

STREAMS = 500
# The web process's own connections beside the streams' (the poller's, a few streams opening).
ALLOWED_ABOVE_BASELINE = 10


class ConnectionCounter(threading.Thread):
    """Counts the test database's connections (but its own) every 20 ms; `peak` since reset."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        db = connection.settings_dict
        self.conn = psycopg.connect(
            host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
            password=db["PASSWORD"] or None, dbname=db["NAME"], autocommit=True,
        )  # fmt: skip
        self.current = self.peak = self.count()
        self.stopped = False

    def count(self) -> int:
        sql = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return self.conn.execute(sql).fetchone()[0]

    def run(self) -> None:
        while not self.stopped:
            self.current = self.count()
            self.peak = max(self.peak, self.current)
            time.sleep(0.02)

    def reset(self) -> None:
        self.peak = self.current


async def _open(host: str, port: int, path: str, key: str, gate: asyncio.Semaphore):
    async with gate:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        assert b" 200 " in head.split(b"\r\n", 1)[0], head
        await asyncio.wait_for(reader.readuntil(b"retry: 2000"), 60)
        return reader, writer


async def _read_to_end(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(-1), 60)


def _cancel(job) -> None:
    try:
        services.job_cancel(job=job)
    finally:
        connection.close()  # a thread of the test's: its connection is not the test's own


def test_500_streams_hold_a_bounded_number_of_connections(transactional_db, celery_queue):
    owner = get_user_model().objects.create(username="streamer")
    _, key = api_key_create_for_username(username="streamer")
    job = services.job_create(
        owner=owner, spec=services.JobSpec(task_app_url="http://127.0.0.1:9", seeds=[1])
    )
    web, base = servers.start_web(EVALHUB_CELERY_QUEUE=celery_queue)
    url = urlparse(base)
    counter = ConnectionCounter()
    try:
        time.sleep(1.0)  # the web process's start-up reads are over
        baseline = counter.count()
        counter.start()
        path = f"/api/eval/jobs/{job.id}/events/stream"

        async def scenario() -> None:
            gate = asyncio.Semaphore(50)
            streams = await asyncio.gather(
                *(_open(url.hostname, url.port, path, key, gate) for _ in range(STREAMS))
            )
            opened_peak = counter.peak
            counter.reset()
            await asyncio.sleep(2.0)  # four polls with every stream open and waiting
            assert max(opened_peak, counter.peak) <= baseline + ALLOWED_ABOVE_BASELINE, (
                baseline, opened_peak, counter.peak,
            )  # fmt: skip
            # Half the clients leave; the job's end reaches the other half.
            for _, writer in streams[: STREAMS // 2]:
                writer.close()
            await asyncio.to_thread(_cancel, job)
            bodies = await asyncio.gather(*(_read_to_end(r) for r, _ in streams[STREAMS // 2 :]))
            for body in bodies:
                assert b"event: eval.policy.job.cancelled" in body
                assert b"event: sse.stream.ended" in body
            for _, writer in streams[STREAMS // 2 :]:
                writer.close()

        asyncio.run(scenario())
        assert counter.peak <= baseline + ALLOWED_ABOVE_BASELINE, (baseline, counter.peak)
        servers.wait_until(
            lambda: counter.current <= baseline,
            timeout=15,
            what=f"the connections to be back at {baseline} (now {counter.current})",
        )
    finally:
        counter.stopped = True
        web.stop()
        counter.join(timeout=5)
        counter.conn.close()
