"""An ended rollout's URL stops reaching the provider within 50 ms at p99, by push (a required
fault bound): a task app that calls its own URL over and over right after answering, through
two web processes that both hold its token in cache, behind a real worker.

The window of a rollout runs from the moment its answer was sent (the worker cannot know the
attempt is over before) to the last of its late calls that reached the provider. The web
processes poll the database only every 10 s here, so what closes the URLs within the bound is
the worker's push (evalhub.revocations): Unix datagrams on the embedded default (SQLite, the
file-system broker), Redis pub/sub when the suite runs on PostgreSQL and Redis (as does
tests/faults/test_revocation_push.py). bench/bench_revocation.py measures it on 400 rollouts."""

from __future__ import annotations

import pytest

from tests.support import servers
from tests.support.jobs import FAST, job_create, job_wait
from tests.support.late_caller import LateCaller, admitted, orm_rows, percentile
from tests.traces.conftest import SERVER_KEY

# The target, on either channel (docs/interceptor.md, "Closing an ended rollout's URL").
BOUND_S = 0.050
SEEDS = 150


@pytest.fixture
def two_webs(transactional_db, celery_queue, fake_upstream):
    """Two web processes before the fake provider, each polling for ended attempts every
    10 s only, and each holding a token 60 s in its cache."""
    webs = [
        servers.start_web(
            EVALHUB_CELERY_QUEUE=celery_queue,
            OPENAI_BASE_URL=fake_upstream.url,
            OPENAI_API_KEY=SERVER_KEY,
            EVALHUB_INTERCEPTOR_REVOCATION_POLL_S="10",
            EVALHUB_INTERCEPTOR_TOKEN_TTL_S="60",
        )  # fmt: skip
        for _ in range(2)
    ]
    yield [base for _, base in webs]
    for web, _ in webs:
        web.stop()


@pytest.mark.worker
def test_an_ended_rollouts_url_stops_reaching_the_provider_within_50ms_at_p99(
    two_webs, fake_upstream, worker_factory, client_alice
):
    caller = LateCaller(bases=two_webs)
    with servers.serve_asgi(caller) as url:
        worker_factory(EVALHUB_PUBLIC_URL=two_webs[0], **FAST)
        job_id = job_create(client_alice, url, seeds=list(range(SEEDS)), max_concurrent=8)
        job = job_wait(job_id, timeout=120)
        servers.wait_until(lambda: len(caller.finished) == SEEDS, timeout=60,
                           what="every rollout's late calls")  # fmt: skip
    assert job.status == "completed", job.error
    assert caller.errors == []
    windows = caller.windows(
        fake_upstream.received, admitted(orm_rows(job_id), fake_upstream.received)
    )
    assert len(windows) == SEEDS
    for run_id, statuses in caller.late_statuses.items():
        assert statuses.count(410) == 2, f"{run_id}: refused by both web processes {statuses}"
    spans = [w.window_s for w in windows.values()]
    arrivals = [w.arrival_s for w in windows.values()]
    through = sum(w.through for w in windows.values())
    made = sum(w.made for w in windows.values())
    print(
        f"\n{SEEDS} rollouts: {through} of {made} late calls reached the provider; window "
        f"p50 {percentile(spans, 50) * 1000:.1f} ms, p99 {percentile(spans, 99) * 1000:.1f} ms, "
        f"max {max(spans) * 1000:.1f} ms; to the provider p99 "
        f"{percentile(arrivals, 99) * 1000:.1f} ms"
    )
    assert percentile(spans, 99) <= BOUND_S, sorted(spans)[-5:]
