"""Workers SIGKILLed at random points of a job, several times, two workers; PostgreSQL
restarted mid-job. Each scenario runs once (module fixture); the tests check what it left."""

from __future__ import annotations

import random
import time

import pytest

from tests.faults.stack import elapsed_since
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create

SEEDS = list(range(150))
KILLS = 4


@pytest.fixture(scope="module")
def killed_job(private_services):
    """A job of 150 seeds on two workers; KILLS times, a random worker is SIGKILLed at a random
    moment and a fresh one started in its place."""
    from tests.faults.stack import Stack

    stack = Stack(**private_services)
    rng = random.Random(20260521)
    # Rollouts of 2 s: the job (at least 30 s of work) outlasts the four kills and the start
    # of each replacement worker, which takes several seconds on a loaded machine.
    app, state = task_app_create(delay_s=2.0)
    kills = []
    try:
        with serve_asgi(app) as url:
            stack.start_web()
            # Two attempts per seed: a seed lost with its worker twice shows whether lost
            # workers spend the task app's attempts.
            stack.env["EVALHUB_ROLLOUT_MAX_ATTEMPTS"] = "2"
            workers = [stack.worker("w1"), stack.worker("w2")]
            stack.beat()
            job_id = stack.job_create(url, SEEDS, max_concurrent=10)
            for n in range(KILLS):
                time.sleep(rng.uniform(0.3, 1.5))
                wait_until(lambda: state.in_flight >= 2, timeout=30, what="rollouts in flight")
                index = rng.randrange(len(workers))
                done = stack.seed_counts(job_id).get("succeeded", 0)
                workers[index].kill()
                kills.append({"worker": index, "seeds_done": done, "in_flight": state.in_flight})
                workers[index] = stack.worker(f"w{index + 1}-{n}")
            started = time.monotonic()
            stack.job_wait(job_id, timeout=120)
            tail_s = elapsed_since(started)
        yield {"stack": stack, "job_id": job_id, "kills": kills, "state": state,
               "tail_s": tail_s}  # fmt: skip
    finally:
        stack.close()


def test_every_seed_has_exactly_one_final_result_and_none_is_lost(killed_job, measure):
    stack, job_id = killed_job["stack"], killed_job["job_id"]
    measure("worker_kills.kills", killed_job["kills"])
    measure("worker_kills.job_done_after_last_kill_s", killed_job["tail_s"])
    assert stack.job(job_id)["status"] == "completed"
    rows = stack.seeds(job_id)
    assert sorted(r["seed"] for r in rows) == SEEDS
    assert all(r["status"] in ("succeeded", "failed") for r in rows), rows
    # One seed event per seed: no seed ended twice.
    assert stack.seed_events(job_id) == SEEDS
    running = stack.query(
        "SELECT count(*) AS n FROM jobs_rolloutattempt a JOIN jobs_seedrun s"
        " ON s.id = a.seed_run_id WHERE s.job_id = %s AND a.status = 'running'",
        job_id,
    )
    assert running[0]["n"] == 0
    results = stack.results(job_id)
    assert sorted(r["seed"] for r in results["results"]) == SEEDS


def test_no_seed_fails_because_its_workers_were_killed(killed_job):
    stack, job_id = killed_job["stack"], killed_job["job_id"]
    rows = stack.seeds(job_id)
    failed = [r for r in rows if r["status"] != "succeeded"]
    assert failed == []
    assert {r["seed"]: r["score"] for r in rows} == {s: score_of(s) for s in SEEDS}


def test_postgres_restarted_mid_job_loses_nothing(stack, measure):
    app, state = task_app_create(delay_s=0.3)
    seeds = list(range(80))
    with serve_asgi(app) as url:
        stack.start_web()
        stack.worker("w1")
        stack.worker("w2")
        stack.beat()
        job_id = stack.job_create(url, seeds, max_concurrent=8)
        wait_until(lambda: state.in_flight >= 4, timeout=30, what="the job to be mid-run")
        stack.postgres.restart(down_s=3.0)
        back = time.monotonic()
        job = stack.job_wait(job_id, timeout=120)
        measure("postgres_restart.job_done_after_postgres_back_s", elapsed_since(back))
        # The API answers again after the restart.
        assert stack.http.get(f"/api/eval/jobs/{job_id}").status_code == 200
    assert job["status"] == "completed", job
    rows = stack.seeds(job_id)
    assert sorted(r["seed"] for r in rows) == seeds
    assert stack.seed_events(job_id) == seeds
    errors = {r["seed"]: r["error"] for r in rows if r["status"] != "succeeded"}
    assert {r["seed"]: (r["status"], r["score"]) for r in rows} == {
        s: ("succeeded", score_of(s)) for s in seeds
    }, errors
