"""Jobs run by real Celery worker processes against a real task app on a loopback port."""

from __future__ import annotations

import json

import pytest

from evalhub import heartbeats
from jobs import services
from jobs.models import EvalJob, JobEvent, RolloutAttempt, SeedRun
from jobs.worker.here import hands_ask
from tests.support.jobs import FAST, JOBS, job_create, job_wait, seeds_of, tasks_published
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.worker


def test_job_runs_every_seed_with_the_task_apps_scores_and_holds_max_concurrent(
    client_alice, worker_factory
):
    app, state = task_app_create(delay_s=0.2)
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        worker_factory(**FAST)
        job_id = job_create(client_alice, url, seeds=list(range(20)), max_concurrent=3)
        job = job_wait(job_id)
    assert job.status == "completed", job.error
    runs = seeds_of(job_id)
    assert {s: r.status for s, r in runs.items()} == {s: "succeeded" for s in range(20)}
    assert {s: r.score for s, r in runs.items()} == {s: score_of(s) for s in range(20)}
    assert state.max_in_flight == 3
    assert all(n == 1 for n in state.seeds_called().values())
    seed2 = runs[2]
    assert seed2.verifier_score == pytest.approx(1 - score_of(2))
    assert seed2.events_score == pytest.approx(score_of(2) / 2)
    assert seed2.task_trace["seed"] == 2
    assert seed2.latency_ms > 0


def test_a_runner_alone_claims_ahead_yet_the_task_app_holds_max_concurrent(
    client_alice, worker_factory
):
    """Alone on a job, a runner holds half its `max_concurrent` more seeds than the task app
    gets (`RolloutSource.ahead`), each posted as soon as a rollout answers: the task app never
    holds more than `max_concurrent`, and a seed's latency and its attempt's start are its
    rollout's, not its wait at the gate (a rollout long)."""
    app, state = task_app_create(delay_s=0.6)
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(client_alice, url, seeds=list(range(12)), max_concurrent=4)
        running = SeedRun.objects.filter(job_id=job_id, status="running")
        wait_until(lambda: running.count() == 6, what="four at the task app, two claimed ahead")
        job = job_wait(job_id)
    assert job.status == "completed", job.error
    assert state.max_in_flight == 4
    assert all(n == 1 for n in state.seeds_called().values()) and len(state.seeds_called()) == 12
    assert all(600 <= r.latency_ms < 1000 for r in seeds_of(job_id).values())
    for attempt in RolloutAttempt.objects.filter(seed_run__job_id=job_id):
        held_s = (attempt.finished_at - attempt.started_at).total_seconds()
        assert attempt.latency_ms / 1000 <= held_s < attempt.latency_ms / 1000 + 0.45


def test_rollout_request_follows_the_contract(client_alice, worker_factory, web_process):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=[4], env_config={"split": "test"},
            policy={"model": "m", "policy_name": "p", "temperature": 0}, timeout=12,
        )  # fmt: skip
        job_wait(job_id)
    (body,) = state.requests
    (headers,) = state.headers
    attempt = RolloutAttempt.objects.get(seed_run__job_id=job_id)
    assert body["run_id"] == attempt.run_id
    assert body["env"] == {"env_name": "demo", "config": {"split": "test"}, "seed": 4}
    config = body["policy"]["config"]
    assert body["policy"]["policy_name"] == "p"
    assert config["model"] == "m" and config["temperature"] == 0
    from traces.tokens import INTERCEPTOR_PATH, token_hash

    prefix = f"{web_process}{INTERCEPTOR_PATH}"
    assert config["inference_url"].startswith(prefix)
    assert token_hash(config["inference_url"][len(prefix) :]) == attempt.token_hash
    assert config["trace_correlation_id"] == attempt.run_id
    assert body["safety"] == {"max_time_s": 12.0}
    assert body["mode"] == "eval"
    assert body["record"]["return_trace"] is True
    assert headers["x-api-key"] == "task-key-123"
    assert headers["authorization"] == "Bearer task-key-123"
    assert headers["x-api-keys"] == "task-key-123"


def events_of(job_id: str) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job_id=job_id).order_by("seq"))


def test_transient_failures_are_retried_with_new_run_ids_and_permanent_ones_are_not(
    client_alice, worker_factory
):
    app, state = task_app_create()
    env_config = {"fail_times": {"1": 2}, "status_always": {"2": 400, "3": 404}}
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(client_alice, url, seeds=[0, 1, 2, 3], env_config=env_config)
        job = job_wait(job_id)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert runs[1].status == "succeeded" and runs[1].score == score_of(1)
    assert runs[1].attempts == 3
    attempts = list(RolloutAttempt.objects.filter(seed_run=runs[1]).order_by("number"))
    assert [(a.number, a.status, a.http_status) for a in attempts] == [
        (1, "failed", 503), (2, "failed", 503), (3, "succeeded", 200),
    ]  # fmt: skip
    assert len({a.run_id for a in attempts}) == 3 and len({a.token_hash for a in attempts}) == 3
    assert all(a.finished_at and a.latency_ms is not None for a in attempts)
    assert "503" in attempts[0].error
    for seed, code in [(2, 400), (3, 404)]:
        assert runs[seed].status == "failed"
        assert runs[seed].attempts == 1
        assert f"HTTP {code}" in runs[seed].error
    assert state.seeds_called() == {0: 1, 1: 3, 2: 1, 3: 1}


def test_a_task_app_saying_retry_after_is_waited_for_and_charged_nothing(
    client_alice, worker_factory
):
    """429 with Retry-After, five times (more than EVALHUB_ROLLOUT_MAX_ATTEMPTS): back-pressure,
    not a failure. The seed waits, is tried again, succeeds, and its failures stay 0."""
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(client_alice, url, seeds=[0, 1], env_config={"busy_times": {"1": 5}})
        job = job_wait(job_id)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert runs[1].status == "succeeded" and runs[1].score == score_of(1)
    assert (runs[1].failures, runs[1].losses, runs[1].attempts) == (0, 0, 6)
    assert state.seeds_called() == {0: 1, 1: 6}
    busy = JobEvent.objects.filter(job_id=job_id, type="eval.policy.environment.busy")
    assert busy.count() == 1 and busy.first().data["limit"] is None


def test_a_seed_that_always_fails_is_failed_after_max_attempts_and_the_job_completes(
    client_alice, worker_factory
):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=[0, 1, 2], env_config={"status_always": {"1": 500}}
        )
        job = job_wait(job_id)
    assert job.status == "completed" and job.error is None
    runs = seeds_of(job_id)
    assert runs[1].status == "failed" and runs[1].attempts == 3
    assert "HTTP 500" in runs[1].error and "attempt 3 of 3" in runs[1].error
    assert runs[0].status == runs[2].status == "succeeded"
    assert state.seeds_called()[1] == 3
    body = client_alice.get(f"{JOBS}/{job_id}/results").json()
    assert body["summary"]["num_failed"] == 1 and body["summary"]["num_successful"] == 2
    # The failed seed counts 0 in the mean; the mean of the scored ones is beside it.
    assert body["summary"]["mean_score"] == pytest.approx((score_of(0) + score_of(2)) / 3)
    assert body["summary"]["mean_score_scored"] == pytest.approx((score_of(0) + score_of(2)) / 2)
    seed_events = [e.data for e in events_of(job_id) if e.type == "eval.policy.seed.completed"]
    assert sorted(e["seed"] for e in seed_events) == [0, 1, 2]
    failed = next(e for e in seed_events if e["seed"] == 1)
    assert failed["status"] == "failed" and "HTTP 500" in failed["error"]
    assert events_of(job_id)[-1].type == "eval.policy.job.completed"


def test_malformed_answers_fail_their_seed_with_a_clear_error_and_are_not_retried(
    client_alice, worker_factory
):
    app, state = task_app_create()
    garbage = {"1": "not_json", "2": "no_metrics", "3": "wrong_types", "4": "list"}
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=[0, 1, 2, 3, 4, 5],
            env_config={"garbage": garbage, "score_field": "reward_mean"},
        )  # fmt: skip
        job = job_wait(job_id)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert "not JSON" in runs[1].error
    assert "no `metrics`" in runs[2].error
    assert "outcome_reward is '1'" in runs[3].error
    assert "not an object" in runs[4].error
    assert all(runs[s].status == "failed" and runs[s].attempts == 1 for s in (1, 2, 3, 4))
    # score falls back to reward_mean when outcome_reward is absent
    assert runs[5].score == score_of(5) and runs[5].reward_mean == score_of(5)
    assert runs[5].outcome_score is None


def test_a_hanging_rollout_is_cut_at_the_jobs_timeout(client_alice, worker_factory):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(client_alice, url, seeds=[0, 1], env_config={"hang": [1]}, timeout=2)
        job = job_wait(job_id)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert runs[1].status == "failed" and runs[1].error == "rollout timed out after 2s"
    # uvloop's timers run on libuv's clock, read in whole milliseconds: one fires up to 1 ms
    # before its deadline on the monotonic clock the latency is measured with.
    assert runs[1].latency_ms >= 2000 - 1
    assert state.seeds_called()[1] == 1  # a timeout is not retried
    assert runs[0].status == "succeeded"


def test_cancel_aborts_rollouts_in_flight_and_keeps_finished_results(client_alice, worker_factory):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=list(range(8)), max_concurrent=3,
            env_config={"hang": [3, 4, 5, 6, 7]},
        )  # fmt: skip
        wait_until(
            lambda: (
                SeedRun.objects.filter(job_id=job_id, status="succeeded").count() == 3
                and state.in_flight == 3
            ),
            what="three seeds done and three hanging",
        )
        response = client_alice.post(f"{JOBS}/{job_id}/cancel")
        assert response.json()["status"] == "cancelled"
        wait_until(
            lambda: not SeedRun.objects.filter(job_id=job_id, status="running").exists(),
            timeout=10,
            what="the worker to abort the rollouts in flight",
        )
        # The aborted rollouts' connections were closed: the task app saw its clients leave.
        wait_until(lambda: state.in_flight == 0, timeout=10, what="the task app to be idle")
    runs = seeds_of(job_id)
    assert {s for s, r in runs.items() if r.status == "succeeded"} == {0, 1, 2}
    assert {s for s, r in runs.items() if r.status == "cancelled"} == {3, 4, 5, 6, 7}
    aborted = RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="cancelled")
    # With them, the attempts of seeds claimed ahead (`RolloutSource.ahead`: the runner is
    # alone on the job), which waited for the task app's room and never reached it.
    assert {3, 4, 5} <= {a.seed_run.seed for a in aborted} <= {3, 4, 5, 6, 7}
    assert not RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="running").exists()
    assert EvalJob.objects.get(pk=job_id).status == "cancelled"
    assert set(state.seeds_called()) == {0, 1, 2, 3, 4, 5}  # 6 and 7 never started


def test_a_worker_killed_mid_job_loses_nothing_and_every_seed_has_one_result(
    client_alice, worker_factory
):
    app, state = task_app_create()
    env = {**FAST, "EVALHUB_LEASE_S": "2", "EVALHUB_REDISPATCH_INTERVAL_S": "0.5"}
    seeds = list(range(12))
    with serve_asgi(app) as url:
        doomed = worker_factory(**env)
        job_id = job_create(
            client_alice, url, seeds=seeds, max_concurrent=4, env_config={"delay_s": 1.0}
        )
        wait_until(
            lambda: (
                SeedRun.objects.filter(job_id=job_id, status="succeeded").count() >= 4
                and state.in_flight >= 1
            ),
            what="the first worker to be mid-job",
        )
        doomed.kill()
        worker_factory(beat=True, **env)
        job = job_wait(job_id, timeout=90)
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert {s: r.status for s, r in runs.items()} == {s: "succeeded" for s in seeds}
    assert {s: r.score for s, r in runs.items()} == {s: score_of(s) for s in seeds}
    seed_events = [
        e.data["seed"] for e in events_of(job_id) if e.type == "eval.policy.seed.completed"
    ]
    assert sorted(seed_events) == seeds
    assert [e.type for e in events_of(job_id)].count("eval.policy.job.completed") == 1
    # The rollouts the killed worker had in flight were run again, by the second worker.
    assert max(state.seeds_called().values()) == 2
    abandoned = RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="abandoned")
    assert abandoned.exists()
    assert not RolloutAttempt.objects.filter(seed_run__job_id=job_id, status="running").exists()


def test_duplicate_deliveries_of_the_job_task_are_harmless(client_alice, worker_factory):
    from jobs.tasks import job_run

    app, state = task_app_create(delay_s=0.1)
    seeds = list(range(15))
    with serve_asgi(app) as url:
        job_id = job_create(client_alice, url, seeds=seeds, max_concurrent=4)
        job_run.delay(job_id)
        job_run.delay(job_id)
        worker_factory(**FAST)
        worker_factory(**FAST)
        job = job_wait(job_id)
        wait_until(lambda: state.in_flight == 0, what="the task app to be idle")
    assert job.status == "completed"
    assert state.seeds_called() == {s: 1 for s in seeds}
    assert state.max_in_flight <= 4
    types = [e.type for e in events_of(job_id)]
    assert types.count("eval.policy.seed.completed") == 15
    assert types.count("eval.policy.job.completed") == 1


def test_a_task_app_that_cannot_be_reached_fails_the_job_fast(client_alice, worker_factory):
    from tests.support.servers import free_port

    worker_factory(**FAST)
    url = f"http://127.0.0.1:{free_port()}"
    job_id = job_create(client_alice, url, seeds=[0, 1, 2])
    job = job_wait(job_id)
    assert job.status == "failed"
    assert job.error.startswith(f"task app unreachable at {url}")
    assert set(SeedRun.objects.filter(job_id=job_id).values_list("status", flat=True)) == {"failed"}
    assert not RolloutAttempt.objects.filter(seed_run__job_id=job_id).exists()
    last = events_of(job_id)[-1]
    assert last.type == "eval.policy.job.failed" and "unreachable" in last.data["error"]


def test_any_http_answer_to_the_health_probe_means_the_task_app_is_there(
    client_alice, worker_factory
):
    from fastapi import FastAPI

    inner, _ = task_app_create()
    app = FastAPI()  # no /health: the probe gets a 404
    app.router.routes = [r for r in inner.router.routes if getattr(r, "path", "") == "/rollout"]
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job = job_wait(job_create(client_alice, url, seeds=[0]))
    assert job.status == "completed"


def test_errors_never_carry_the_task_app_key_or_the_interceptor_token(client_alice, worker_factory):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        job_id = job_create(
            client_alice, url, seeds=[0, 1],
            env_config={"status_always": {"0": 400, "1": 500}, "echo_secrets": True},
        )  # fmt: skip
        job_wait(job_id)
    token = state.requests[0]["policy"]["config"]["inference_url"].rsplit("/", 1)[1]
    errors = [sr.error for sr in SeedRun.objects.filter(job_id=job_id)]
    errors += [a.error for a in RolloutAttempt.objects.filter(seed_run__job_id=job_id)]
    errors += [json.dumps(e.data) for e in events_of(job_id)]
    assert all("key=<redacted>" in e for e in errors[:2])
    for text in errors:
        assert "task-key-123" not in text and token not in text
    assert "task-key-123" not in client_alice.get(f"{JOBS}/{job_id}/results").content.decode()


def test_the_inference_url_works_as_an_openai_base_url_of_this_attempt(
    client_alice, worker_factory
):
    """The interceptor itself lives elsewhere; a stand-in at EVALHUB_PUBLIC_URL shows that
    a task app appending /chat/completions reaches it with the token of its attempt."""
    from fastapi import FastAPI

    seen: list[str] = []
    interceptor = FastAPI()

    @interceptor.post("/api/interceptor/v1/{token}/chat/completions")
    async def chat(token: str) -> dict:
        seen.append(token)
        return {"choices": [{"message": {"role": "assistant", "content": "4"}}]}

    app, state = task_app_create()
    with serve_asgi(interceptor) as public_url, serve_asgi(app) as url:
        worker_factory(EVALHUB_PUBLIC_URL=public_url, **FAST)
        job_id = job_create(client_alice, url, seeds=[0, 1], env_config={"call_llm": True})
        job = job_wait(job_id)
    assert job.status == "completed"
    from traces.tokens import token_hash

    hashes = set(
        RolloutAttempt.objects.filter(seed_run__job_id=job_id).values_list("token_hash", flat=True)
    )
    assert {token_hash(t) for t in seen} == hashes and len(hashes) == 2
    assert all(answer["status"] == 200 for answer in state.llm_answers)


def test_a_job_whose_message_was_lost_is_handed_out_again_by_the_scheduler(
    client_alice, worker_factory
):
    """As after a broker restart without persistence: the job's message is gone."""
    from evalhub.celery import app as celery_app

    app, state = task_app_create()
    with serve_asgi(app) as url:
        job_id = job_create(client_alice, url, seeds=[0, 1, 2])
        assert celery_app.control.purge() >= 1
        worker_factory(beat=True, EVALHUB_LEASE_S="1", EVALHUB_REDISPATCH_INTERVAL_S="0.5", **FAST)
        job = job_wait(job_id)
    assert job.status == "completed"
    assert state.seeds_called() == {0: 1, 1: 1, 2: 1}
    assert EvalJob.objects.get(pk=job_id).dispatched_at is not None


def test_a_job_whose_last_result_was_written_by_a_worker_that_died_is_ended_by_the_scheduler(
    client_alice, worker_factory
):
    """Its every sample ended, the job itself not: the worker that wrote the last result died
    before ending it, and its message is gone."""
    from evalhub.celery import app as celery_app

    app, state = task_app_create()
    with serve_asgi(app) as url:
        job_id = job_create(client_alice, url, seeds=[0, 1, 2])
        assert celery_app.control.purge() >= 1
        services.job_start(job_id=job_id)
        SeedRun.objects.filter(job_id=job_id).update(status="succeeded", score=1.0, attempts=1)
        worker_factory(beat=True, EVALHUB_LEASE_S="1", EVALHUB_REDISPATCH_INTERVAL_S="0.5", **FAST)
        job = job_wait(job_id)
    assert job.status == "completed" and state.seeds_called() == {}
    completed = JobEvent.objects.get(job_id=job_id, type="eval.policy.job.completed")
    assert completed.data["summary"]["num_successful"] == 3


def test_a_job_larger_than_one_runner_is_shared_by_two_worker_processes(
    client_alice, worker_factory
):
    """A runner holds at most 2; its first claim fills it, so it sends the job's message once
    more and the other worker lends a hand. No fan-out setting: messages on the queue."""
    app, state = task_app_create(delay_s=0.3)
    seeds = list(range(16))
    env = {"EVALHUB_RUNNER_MAX_INFLIGHT": "2", **FAST}  # each process holds at most 2
    with serve_asgi(app) as url:
        workers = [worker_factory(concurrency=1, **env), worker_factory(concurrency=1, **env)]
        job_id = job_create(client_alice, url, seeds=seeds, max_concurrent=4)
        job = job_wait(job_id)
    assert job.status == "completed"
    assert state.seeds_called() == {s: 1 for s in seeds}
    assert state.max_in_flight == 4
    pids = {
        w.split(":")[1]
        for w in RolloutAttempt.objects.filter(seed_run__job_id=job_id).values_list(
            "worker", flat=True
        )
    }
    assert pids == {str(w.proc.pid) for w in workers}


def test_a_hand_reaching_the_worker_process_that_runs_the_job_joins_its_runner(
    client_alice, worker_factory
):
    """A runner holds at most 2 at first; each hand it asks for reaches the same (only) worker
    process, whose runner takes it: 2 more slots, up to the job's 6, in one runner (one
    event loop), not three runners side by side in one process."""
    app, state = task_app_create(delay_s=0.3)
    seeds = list(range(24))
    env = {"EVALHUB_RUNNER_MAX_INFLIGHT": "2", **FAST}
    with serve_asgi(app) as url:
        worker_factory(concurrency=4, **env)
        job_id = job_create(client_alice, url, seeds=seeds, max_concurrent=6)
        job = job_wait(job_id)
    assert job.status == "completed"
    assert state.seeds_called() == {s: 1 for s in seeds}
    assert state.max_in_flight == 6
    runners = set(
        RolloutAttempt.objects.filter(seed_run__job_id=job_id).values_list("worker", flat=True)
    )
    assert len(runners) == 1, runners


def test_a_runner_asks_for_as_many_hands_as_its_seeds_left_keep_busy_and_workers_are_idle(
    worker_factory, celery_queue, settings
):
    """Three live workers (real processes, their real heartbeats), runners of two rollouts
    each: a claim that leaves one seed for others asks for one hand, three seeds for two, and
    forty for no more than the two other workers: a fourth, draining (alive, taking no
    messages), is no hand."""
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_queue
    settings.EVALHUB_RUNNER_MAX_INFLIGHT = 2
    for _ in range(3):
        worker_factory(**FAST)
    draining = heartbeats.HeartbeatWriter("draining@test")
    draining.draining = True
    assert draining.beat()
    try:
        wait_until(lambda: len(heartbeats.live_workers()) == 4, timeout=30, what="4 heartbeats")
        for room, hands in ((1, 1), (3, 2), (40, 2)):
            with tasks_published() as sent:
                hands_ask(job_id="eval-none", room=room)  # a job not there: taken, ignored
            assert sent == ["jobs.job_run"] * hands
    finally:
        draining.clear()
