"""The channel that pushes ended attempts to the web processes (evalhub/revocations.py): a
publish reaches every subscriber, on Unix datagrams and on Redis; publishing with nobody
listening, with a web process gone, or with Redis down, never raises, and a web process hears
the pushes again once Redis is back. The windows it closes,
with real processes, are in tests/traces/test_revocation_push.py and tests/faults/."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest
import redis

from evalhub import revocations
from tests.support.private_services import PrivateRedis, ServiceUnavailable
from tests.support.servers import free_port

SHARED_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def channel_of_our_own(settings):
    """A queue name of this test's own, so neither the folder nor the Redis channel is shared."""
    settings.CELERY_TASK_DEFAULT_QUEUE = f"revocations-{uuid.uuid4().hex[:8]}"
    settings.CELERY_BROKER_URL = "filesystem://"
    return settings


async def _received(publish_ids: list[list[int]], subscribers: int = 2) -> list[list[int]]:
    """What each of `subscribers` subscribers got from publishing `publish_ids`."""
    got: list[list[int]] = [[] for _ in range(subscribers)]
    subs = [revocations.Subscriber(got[n].extend) for n in range(subscribers)]
    for sub in subs:
        sub.start()
    try:
        await asyncio.sleep(0.3)  # a Redis subscription is made in the background
        for ids in publish_ids:
            revocations.publish(ids)
        expected = sum(len(ids) for ids in publish_ids)
        for _ in range(200):
            if all(len(g) >= expected for g in got):
                break
            await asyncio.sleep(0.01)
    finally:
        for sub in subs:
            sub.close()
    return got


def test_every_web_process_gets_what_is_published_by_datagram(channel_of_our_own):
    many = list(range(1000, 1000 + 2 * revocations.CHUNK + 7))  # several datagrams
    got = asyncio.run(_received([[7], [8, 9], many]))
    assert [sorted(g) for g in got] == [sorted([7, 8, 9, *many])] * 2
    assert list(revocations.folder().glob("*.sock")) == [], "each closed its socket"


def test_a_dead_web_processs_socket_is_removed_and_publish_goes_on(channel_of_our_own):
    folder = revocations.folder()
    folder.mkdir(parents=True, exist_ok=True)
    dead = folder / "1-dead.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(dead))
    sock.close()  # the file stays, nobody holds it: a web process killed
    got = asyncio.run(_received([[42]], subscribers=1))
    assert got == [[42]]
    assert not dead.exists()


def test_publishing_with_no_web_process_is_a_no_op(channel_of_our_own):
    assert not revocations.folder().exists()
    revocations.publish([1, 2, 3])
    revocations.publish([])


def _shared_redis_up() -> bool:
    try:
        return bool(redis.Redis.from_url(SHARED_REDIS, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@pytest.mark.skipif(not _shared_redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_every_web_process_gets_what_is_published_over_redis(channel_of_our_own):
    channel_of_our_own.CELERY_BROKER_URL = SHARED_REDIS
    got = asyncio.run(_received([[7], [8, 9]]))
    assert [sorted(g) for g in got] == [[7, 8, 9]] * 2


def test_with_redis_down_publishing_and_subscribing_never_raise(channel_of_our_own):
    channel_of_our_own.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    got = asyncio.run(_received([[1], [2, 3]]))
    assert got == [[], []]
    publisher = revocations._publisher()
    assert isinstance(publisher, revocations.RedisPublisher)
    for _ in range(100):  # its thread keeps taking what is queued, and drops it
        if publisher.pending.empty():
            break
        asyncio.run(asyncio.sleep(0.01))
    assert publisher.pending.empty()


def test_a_web_process_hears_the_pushes_again_once_redis_is_back(channel_of_our_own, tmp_path):
    try:
        server = PrivateRedis(tmp_path)
    except ServiceUnavailable as exc:
        pytest.skip(str(exc))
    server.start()
    channel_of_our_own.CELERY_BROKER_URL = server.url
    got: list[int] = []

    async def pushed_until_heard(n: int) -> None:
        """Publish `n` every 0.2 s until the subscriber has it (a Redis that failed is not
        tried for a second, and the subscriber listens again a second after it lost Redis)."""
        for _ in range(100):
            revocations.publish([n])
            await asyncio.sleep(0.2)
            if n in got:
                return
        raise AssertionError(f"{n} never arrived")

    async def scenario() -> None:
        sub = revocations.Subscriber(got.extend)
        sub.start()
        try:
            await pushed_until_heard(1)
            await asyncio.to_thread(server.restart, down_s=1.0)
            await pushed_until_heard(2)
        finally:
            sub.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
