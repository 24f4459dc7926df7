"""What a worker builds as it starts, so that its first runner does not (`jobs.worker.clients.warm`,
run on Celery's `worker_init`, before the worker's heap is frozen)."""

from __future__ import annotations

import httpx
from celery.signals import worker_init

from jobs import tasks
from jobs.worker import clients


def test_a_worker_builds_its_runners_tls_context_as_it_starts():
    assert tasks.worker_warm in worker_init._live_receivers(None)
    clients._ssl_context.cache_clear()
    tasks.worker_warm()
    assert clients._ssl_context.cache_info().currsize == 1
    # A runner's clients then take the context built, not one of their own.
    client = httpx.AsyncClient(verify=clients._ssl_context())
    assert client._transport._pool._ssl_context is clients._ssl_context()
