"""What a worker builds as it starts, so that its first runner does not (`jobs.worker.clients.warm`,
run on Celery's `worker_init`, before the worker's heap is frozen)."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from celery.signals import worker_init

from jobs import tasks
from jobs.worker import clients


@pytest.fixture
def contexts_built(monkeypatch):
    """How many TLS contexts the process builds from here on (each loads the CA bundle)."""
    built = []
    real = ssl.create_default_context

    def counted(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    clients.ssl_context.cache_clear()
    yield built
    clients.ssl_context.cache_clear()


def test_worker_start_is_hooked_to_celerys_worker_init():
    # Disconnecting tells whether it was connected; it is connected again at once.
    assert worker_init.disconnect(tasks.worker_warm)
    worker_init.connect(tasks.worker_warm)


def test_a_worker_builds_the_tls_context_as_it_starts_and_its_runners_build_none(contexts_built):
    tasks.worker_warm()
    assert len(contexts_built) == 1

    async def runner_clients() -> None:
        async with clients.ClientPool(size=256) as pool:  # 32 httpx clients and a session
            assert len(pool.clients) == 32

    asyncio.run(runner_clients())
    assert len(contexts_built) == 1
