"""Faults that are ours, not the task app's: a lost worker, our web process restarting. They
must never use up a seed's attempts, and a surviving worker takes over a dead one's seeds."""

from __future__ import annotations

import pytest

from jobs.models import RolloutAttempt, SeedRun
from tests.support import servers
from tests.support.jobs import FAST, job_create, job_wait, seeds_of
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.worker


def test_a_web_restart_mid_job_fails_no_seed_and_uses_up_no_attempt(
    client_alice, worker_factory, fake_upstream
):
    """The interceptor is down when the rollouts start: every task app call fails (the task
    app answers 500, as it would), yet with a single attempt allowed each seed succeeds once
    evalhub's web process is back."""
    port = servers.free_port()
    public_url = f"http://127.0.0.1:{port}"
    app, state = task_app_create()
    seeds = [0, 1, 2, 3]
    with serve_asgi(app) as url:
        worker_factory(
            EVALHUB_PUBLIC_URL=public_url, EVALHUB_ROLLOUT_MAX_ATTEMPTS="1",
            EVALHUB_SEED_MAX_LOSSES="1000", **FAST,
        )  # fmt: skip
        job_id = job_create(
            client_alice, url, seeds=seeds, max_concurrent=4, env_config={"call_llm": True}
        )
        wait_until(
            lambda: (
                RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="abandoned").count()
                >= len(seeds)
            ),
            what="every seed to have met the interceptor down",
        )
        web, _ = servers.start_web(
            port=port, OPENAI_BASE_URL=fake_upstream.url, OPENAI_API_KEY="sk-server"
        )
        try:
            job = job_wait(job_id, timeout=60)
        finally:
            web.stop()
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert {s: (r.status, r.score) for s, r in runs.items()} == {
        s: ("succeeded", score_of(s)) for s in seeds
    }
    assert all(r.failures == 0 and r.losses >= 1 for r in runs.values())
    assert all(r.attempts == r.losses + 1 for r in runs.values())
    lost = RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="abandoned")
    assert all("interceptor could not be reached" in a.error for a in lost)
    assert "not counted against the task app" in lost.first().error
    assert len(fake_upstream.received) == len(seeds)


def test_a_surviving_worker_takes_over_the_seeds_of_a_killed_worker(client_alice, worker_factory):
    """Two runners share the job; one worker is killed with its message. The survivor runs
    Celery beat, as every deployment does (`make run`'s worker, compose's `beat`): a runner
    that finds the rest of the job leased to another leaves it to that one, and when that one
    is dead, beat's re-dispatch hands the job out again (jobs/worker/runner.py). The survivor
    runs the dead worker's seeds, charging them nothing."""
    app, state = task_app_create()
    env = {**FAST, "EVALHUB_LEASE_S": "2", "EVALHUB_ROLLOUT_MAX_ATTEMPTS": "1"}
    seeds = list(range(8))
    with serve_asgi(app) as url:
        doomed = worker_factory(concurrency=1, EVALHUB_RUNNER_MAX_INFLIGHT="2", **env)
        worker_factory(concurrency=1, EVALHUB_RUNNER_MAX_INFLIGHT="2", beat=True, **env)
        job_id = job_create(
            client_alice, url, seeds=seeds, max_concurrent=4, env_config={"delay_s": 1.5}
        )
        doomed_pid = str(doomed.proc.pid)
        wait_until(
            lambda: SeedRun.objects.filter(
                job_id=job_id, status="running", lease_owner__contains=f":{doomed_pid}:"
            ).exists(),
            what="the doomed worker to hold a seed",
        )
        doomed.kill()
        job = job_wait(job_id, timeout=60)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert {s: r.status for s, r in runs.items()} == {s: "succeeded" for s in seeds}
    assert all(r.failures == 0 for r in runs.values())
    assert sum(r.losses for r in runs.values()) >= 1
    # Killed between its claim and its call, or mid-call: either way run again by the survivor.
    assert set(state.seeds_called()) == set(seeds)
