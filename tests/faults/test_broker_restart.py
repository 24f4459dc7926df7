"""Redis (the broker) restarted while a job runs: nothing is lost, and the workers consume again
once it is back (a worker that could not would exit, for its supervisor to restart it)."""

from __future__ import annotations

import time

from tests.faults.stack import elapsed_since
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create

REDIS_DOWN_S = 5.0


def test_workers_consume_again_after_a_redis_restart_mid_job(stack, measure):
    app, state = task_app_create(delay_s=0.5)
    with serve_asgi(app) as url:
        stack.start_web()
        workers = [stack.worker("w1"), stack.worker("w2")]
        stack.beat()
        seeds = list(range(120))
        job_a = stack.job_create(url, seeds, max_concurrent=6)
        wait_until(lambda: state.in_flight >= 3, timeout=30, what="job A to be mid-run")
        stack.redis.restart(down_s=REDIS_DOWN_S)
        back = time.monotonic()
        # A worker whose consumer died exits (the watchdog); its supervisor starts it again.
        workers = stack.supervise(workers, seconds=15)
        measure("redis_restart.workers_exited_and_restarted", stack.restarts)
        # /healthz counts consuming workers again once both have reconnected.
        wait_until(lambda: len(stack.health()["workers"]) == 2, timeout=45, interval=0.2,
                   what="/healthz to count both workers again")  # fmt: skip
        measure("redis_restart.both_workers_consuming_after_redis_back_s", elapsed_since(back))
        # A job created after the broker is back must be picked up by the workers.
        job_b = stack.job_create(url, [100, 101, 102], max_concurrent=3)
        stack.job_wait(job_b, timeout=60)
        measure("redis_restart.new_job_done_after_redis_back_s", elapsed_since(back))
        stack.job_wait(job_a, timeout=90)
    for job_id, job_seeds in ((job_a, seeds), (job_b, [100, 101, 102])):
        assert stack.job(job_id)["status"] == "completed"
        rows = stack.seeds(job_id)
        assert {r["seed"]: (r["status"], r["score"]) for r in rows} == {
            s: ("succeeded", score_of(s)) for s in job_seeds
        }
        assert stack.seed_events(job_id) == job_seeds
    # Both workers (or their replacements) are alive and their consumers answer.
    for worker in workers:
        assert worker.proc.poll() is None, worker.log()[-3000:]
        assert stack.ping(worker), worker.log()[-3000:]
