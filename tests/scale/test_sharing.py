"""Workers share jobs: any idle worker joins a running job without a fan-out setting, jobs
submitted together all progress while a big one runs, and workers killed and started again
mid-job leave exactly one result per seed. Real worker processes, a real task app."""

from __future__ import annotations

import random
import time

import pytest

from jobs import services
from jobs.models import EvalJob, JobEvent, RolloutAttempt, SeedRun
from tests.support.jobs import FAST, job_create, job_wait, seeds_of
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.worker


def _worker_pids(job_id: str) -> set[str]:
    """The worker processes that ran attempts of the job (`host:pid`)."""
    workers = RolloutAttempt.objects.filter(seed_run__job_id=job_id).values_list(
        "worker", flat=True
    )
    return {w.rsplit(":", 1)[0] for w in workers.distinct()}


def _succeeded(job_id: str) -> int:
    return SeedRun.objects.filter(job_id=job_id, status="succeeded").count()


def test_idle_workers_join_a_running_job_without_a_fanout(client_alice, worker_factory):
    # A runner holds at most 4 of the job's 12: its first claim fills it and it asks for a
    # hand, and so does the next, so the job spreads without a fan-out setting.
    app, _ = task_app_create(delay_s=0.2)
    with serve_asgi(app) as url:
        for _ in range(3):
            worker_factory(concurrency=2, EVALHUB_RUNNER_MAX_INFLIGHT="4", **FAST)
        job_id = job_create(client_alice, url, seeds=list(range(400)), max_concurrent=12)
        job = job_wait(job_id, timeout=120)
    assert job.status == "completed"
    assert {s: r.score for s, r in seeds_of(job_id).items()} == {s: score_of(s) for s in range(400)}
    # One message was sent at first; the other workers joined on their own.
    assert len(_worker_pids(job_id)) >= 2


def test_two_jobs_submitted_together_both_progress_while_a_big_one_runs(
    client_alice, worker_factory
):
    app, _ = task_app_create(delay_s=0.02)
    with serve_asgi(app) as url:
        worker_factory(concurrency=4, **FAST)
        worker_factory(concurrency=4, **FAST)
        big = job_create(client_alice, url, seeds=list(range(20_000)), max_concurrent=32)
        wait_until(lambda: _succeeded(big) >= 50, timeout=60, what="the big job to be running")
        small = [
            job_create(client_alice, url, seeds=list(range(40)), max_concurrent=4) for _ in range(2)
        ]
        done = [job_wait(job_id, timeout=120) for job_id in small]
        big_done_meanwhile = _succeeded(big)
        big_status = EvalJob.objects.get(pk=big).status
        services.job_cancel(job=EvalJob.objects.get(pk=big))
        job_wait(big, timeout=60)
    assert [j.status for j in done] == ["completed", "completed"]
    assert all(_succeeded(j.id) == 40 for j in done)
    # Both small jobs finished while the big one was still running, not after it.
    assert big_status == "running"
    assert 50 <= big_done_meanwhile < 20_000


def test_workers_killed_and_started_again_leave_exactly_one_result_per_seed(
    client_alice, worker_factory
):
    rng = random.Random(17)
    # A runner holds 2 of the job's 6: three runners share it, on whichever workers are alive.
    env = {**FAST, "EVALHUB_LEASE_S": "2", "EVALHUB_ROLLOUT_MAX_ATTEMPTS": "2",
           "EVALHUB_REDISPATCH_INTERVAL_S": "0.5", "EVALHUB_RUNNER_MAX_INFLIGHT": "2"}  # fmt: skip
    seeds = list(range(300))
    app, state = task_app_create(delay_s=0.3)
    kills = 0
    with serve_asgi(app) as url:
        worker_factory(concurrency=2, beat=True, name="beat-worker", **env)  # never killed
        workers = [worker_factory(concurrency=2, name=f"w{n}", **env) for n in range(3)]
        # Long enough (about 15 s) for the restarted workers to take slices of the job.
        job_id = job_create(client_alice, url, seeds=seeds, max_concurrent=6)
        for n in range(4):
            time.sleep(rng.uniform(0.2, 1.0))
            if EvalJob.objects.get(pk=job_id).is_terminal:
                break
            index = rng.randrange(len(workers))
            workers[index].kill()
            kills += 1
            workers[index] = worker_factory(concurrency=2, name=f"w{index}-{n}", **env)
        job = job_wait(job_id, timeout=180)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert {s: (r.status, r.score) for s, r in runs.items()} == {
        s: ("succeeded", score_of(s)) for s in seeds
    }
    # Exactly one result each: one seed event per seed, no attempt left running.
    events = JobEvent.objects.filter(job_id=job_id, type="eval.policy.seed.completed")
    assert sorted(e.data["seed"] for e in events) == seeds
    # Each counts on from the one before, whichever worker wrote it: 1, 2... in their order.
    assert [e.data["completed"] for e in events.order_by("seq")] == list(range(1, len(seeds) + 1))
    assert not RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="running").exists()
    assert all(r.failures == 0 for r in runs.values())
    assert kills >= 2
    # Shared: runners on more than one process (which ones depends on where the kills fell:
    # a runner keeps its slice while no other message waits).
    assert len(_worker_pids(job_id)) >= 2


def test_a_job_submitted_after_a_big_one_starts_within_seconds_not_after_it(
    client_alice, worker_factory
):
    """One worker with two threads, a big job wanting four runners (32 at a time, 8 a runner):
    its messages fill the threads and wait in the queue. A job posted later still starts
    within a few slices, because every runner sends its job's message to the back of the
    queue when its slice ends."""
    app, _ = task_app_create(delay_s=0.05)
    env = {**FAST, "EVALHUB_RUNNER_MAX_INFLIGHT": "8", "EVALHUB_RUNNER_SLICE_S": "2"}
    with serve_asgi(app) as url:
        worker_factory(concurrency=2, **env)
        big = job_create(client_alice, url, seeds=list(range(20_000)), max_concurrent=32)
        wait_until(lambda: _succeeded(big) >= 200, timeout=60, what="the big job to be running")
        posted = time.monotonic()
        late = job_create(client_alice, url, seeds=list(range(8)), max_concurrent=4)
        wait_until(
            lambda: RolloutAttempt.objects.filter(seed_run__job_id=late).exists(),
            timeout=30, what="the late job's first rollout",
        )  # fmt: skip
        started_after = time.monotonic() - posted
        job = job_wait(late, timeout=60)
        big_status = EvalJob.objects.get(pk=big).status
        services.job_cancel(job=EvalJob.objects.get(pk=big))
        job_wait(big, timeout=60)
    assert job.status == "completed" and _succeeded(late) == 8
    assert big_status == "running"  # it started and ended while the big job ran
    # Two slices of 2 s for the queue to turn, and the worker's poll of the file broker.
    assert started_after < 10, started_after
