"""Faults at the default settings (60 s leases, beat every 2 s): what a user running evalhub as
shipped waits after losing a worker or a database restart."""

from __future__ import annotations

import time

from tests.faults.stack import FAST, elapsed_since
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create

# Only the task app's backoff is shortened; leases, redispatch and loss detection are the
# defaults.
DEFAULTS = {
    k: v for k, v in FAST.items() if k not in ("EVALHUB_LEASE_S", "EVALHUB_REDISPATCH_INTERVAL_S")
}


def _attempts_started_since(stack, job_id: str, at: float) -> int:
    row = stack.query_one(
        "SELECT count(*) AS n FROM jobs_rolloutattempt a JOIN jobs_seedrun s"
        " ON s.id = a.seed_run_id WHERE s.job_id = %s"
        " AND a.started_at > to_timestamp(%s)",
        job_id, at,
    )  # fmt: skip
    return row["n"]


def _every_seed_succeeded_once(stack, job: dict, job_id: str, seeds: list[int]) -> None:
    """The job completed with the task app's score for every seed, and one result event each."""
    assert job["status"] == "completed", job
    rows = stack.seeds(job_id)
    assert {r["seed"]: (r["status"], r["score"]) for r in rows} == {
        s: ("succeeded", score_of(s)) for s in seeds
    }
    assert stack.seed_events(job_id) == seeds


def _longest_pause_in_starts(stack, job_id: str, *, after: float) -> float:
    """The longest time between two rollouts of the job starting, from `after` to its last."""
    rows = stack.query(
        "SELECT extract(epoch FROM a.started_at) AS t FROM jobs_rolloutattempt a"
        " JOIN jobs_seedrun s ON s.id = a.seed_run_id WHERE s.job_id = %s"
        " AND a.started_at > to_timestamp(%s) ORDER BY a.started_at",
        job_id, after,
    )  # fmt: skip
    times = [after] + [float(r["t"]) for r in rows]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def test_a_job_whose_only_runner_is_killed_starts_rollouts_again_within_10_s(stack, measure):
    stack.env = {k: v for k, v in stack.env.items() if k not in FAST} | DEFAULTS
    app, state = task_app_create(delay_s=1.0)
    seeds = list(range(60))
    with serve_asgi(app) as url:
        stack.start_web()
        doomed = stack.worker("doomed")
        stack.beat()
        job_id = stack.job_create(url, seeds, max_concurrent=6)
        wait_until(lambda: state.in_flight >= 4, timeout=30, what="rollouts in flight")
        survivor = stack.worker("survivor")  # as a supervisor would start one
        wait_until(lambda: stack.ping(survivor), timeout=30, what="the second worker")
        killed_at = time.time()
        doomed.kill()
        wait_until(
            lambda: _attempts_started_since(stack, job_id, killed_at) > 0,
            timeout=30, what="a rollout started after the kill",
        )  # fmt: skip
        restarted_s = time.time() - killed_at
        measure("defaults.rollouts_again_after_only_runner_killed_s", round(restarted_s, 1))
        job = stack.job_wait(job_id, timeout=120)
    _every_seed_succeeded_once(stack, job, job_id, seeds)
    assert restarted_s <= 10.0, restarted_s


def test_a_5_s_postgres_restart_costs_at_most_15_s_of_progress(stack, measure):
    stack.env = {k: v for k, v in stack.env.items() if k not in FAST} | DEFAULTS
    app, state = task_app_create(delay_s=0.3)
    seeds = list(range(200))
    with serve_asgi(app) as url:
        stack.start_web()
        stack.worker("w1")
        stack.beat()
        job_id = stack.job_create(url, seeds, max_concurrent=8)
        wait_until(lambda: state.in_flight >= 4, timeout=30, what="the job to be mid-run")
        down_at = time.time()
        stack.postgres.restart(down_s=5.0)
        back = time.monotonic()
        wait_until(
            lambda: _attempts_started_since(stack, job_id, time.time() - 1) > 0,
            timeout=60, what="rollouts starting again",
        )  # fmt: skip
        progress_lost_s = time.time() - down_at
        measure("defaults.postgres_5s_restart.progress_lost_s", round(progress_lost_s, 1))
        job = stack.job_wait(job_id, timeout=120)
        measure("defaults.postgres_5s_restart.job_done_after_back_s", elapsed_since(back))
    _every_seed_succeeded_once(stack, job, job_id, seeds)
    assert progress_lost_s <= 15.0, progress_lost_s


def test_a_5_s_redis_restart_costs_at_most_15_s_of_progress_and_abandons_nothing(stack, measure):
    """Redis restarted under two workers holding the job's messages (Celery 5.7.0 then loses
    their consumers, see docs/reliability.md): their runners need only the database, so the
    rollouts in flight finish and are kept, and rollouts start again within 15 s."""
    stack.env = {k: v for k, v in stack.env.items() if k not in FAST} | DEFAULTS
    app, state = task_app_create(delay_s=1.0)
    seeds = list(range(200))
    with serve_asgi(app) as url:
        stack.start_web()
        workers = [stack.worker("w1"), stack.worker("w2")]
        stack.beat()
        job_id = stack.job_create(url, seeds, max_concurrent=8)
        wait_until(lambda: state.in_flight >= 6, timeout=30, what="the job to be mid-run")
        down_at = time.time()
        stack.redis.restart(down_s=5.0)
        back = time.monotonic()
        # As a supervisor would: a worker that exits is started again, meanwhile.
        workers = stack.supervise(workers, seconds=12)
        measure("defaults.redis_5s_restart.workers_restarted", len(stack.restarts))
        job = stack.job_wait(job_id, timeout=180)
        measure("defaults.redis_5s_restart.job_done_after_back_s", elapsed_since(back))
    abandoned = stack.query_one(
        "SELECT count(*) AS n FROM jobs_rolloutattempt a JOIN jobs_seedrun s"
        " ON s.id = a.seed_run_id WHERE s.job_id = %s AND a.status = 'abandoned'",
        job_id,
    )["n"]  # fmt: skip
    measure("defaults.redis_5s_restart.attempts_abandoned", abandoned)
    progress_lost_s = _longest_pause_in_starts(stack, job_id, after=down_at - 1)
    measure("defaults.redis_5s_restart.progress_lost_s", round(progress_lost_s, 1))
    _every_seed_succeeded_once(stack, job, job_id, seeds)
    assert progress_lost_s <= 15.0, progress_lost_s
    assert abandoned == 0
