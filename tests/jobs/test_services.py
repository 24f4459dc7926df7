"""A job's life: finishing when every seed is over, the periodic re-dispatch."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import claims, ending, events, leases, public, services, stopping
from jobs.models import EvalJob, JobEvent, RolloutAttempt, SeedRun
from jobs.scores import Scores
from tests.jobs.conftest import claim
from tests.support.jobs import attempt_end
from traces.results.result_rows import job_summary

pytestmark = pytest.mark.django_db


def test_job_completes_when_every_seed_is_over_and_fails_when_none_could_connect(db):
    owner = get_user_model().objects.create(username="o")
    for error, expected in [("HTTP 500", "completed"), ("task app unreachable: refused", "failed")]:
        job = services.job_create(
            owner=owner, spec=services.JobSpec(task_app_url="http://x", seeds=[1, 2])
        )
        services.job_start(job_id=job.id)
        assert (
            services.job_finish_if_done(job_id=job.id, summarize=job_summary) is None
        )  # seeds still pending
        for sr in claim(job):
            leases.seed_run_finish(
                seed_run_id=sr.pk,
                worker="w1",
                status="failed",
                result=leases.SeedResult(error=error),
            )
        assert services.job_finish_if_done(job_id=job.id, summarize=job_summary) == expected
        assert (
            services.job_finish_if_done(job_id=job.id, summarize=job_summary) is None
        )  # only once
        last = JobEvent.objects.filter(job=job).order_by("-seq").first()
        assert last.type == f"eval.policy.job.{expected}"


@pytest.mark.django_db(transaction=True)
def test_a_finished_jobs_summary_is_made_before_its_row_is_locked(job):
    """The summary is a pass over every row of the job (seconds for a big one): made while a
    runner's heartbeat on the job row, in a connection of its own, goes through (on SQLite,
    while any other write does), and the job is completed with it."""
    for sr in claim(job):
        leases.seed_run_finish(seed_run_id=sr.pk, worker="w1", status="succeeded",
                               result=leases.SeedResult(scores=Scores(score=1.0)))  # fmt: skip
    SeedRun.objects.filter(job=job, status="pending").update(status="cancelled")
    written = []

    def heartbeat():
        try:
            written.append(EvalJob.objects.filter(pk=job.pk).update(runner_seen_at=timezone.now()))
        finally:
            connection.close()

    def summarize(summarized):
        writer = threading.Thread(target=heartbeat)
        writer.start()
        writer.join(20)  # on the old code: waited for the lock held around this summary
        assert not writer.is_alive()
        return job_summary(summarized)

    assert services.job_finish_if_done(job_id=job.id, summarize=summarize) == "completed"
    assert written == [1]
    [event] = JobEvent.objects.filter(job=job, type="eval.policy.job.completed")
    summary = event.data["summary"]
    assert (summary["num_successful"], summary["num_cancelled"]) == (3, 7)


@pytest.mark.django_db(transaction=True)
def test_runners_seeing_a_job_over_at_once_make_its_summary_once(job):
    """The runners of every worker on a job see it over as its last results land: one makes
    the summary and ends the job, the others leave it (each made it, for one to write it)."""
    if connection.vendor != "postgresql":
        pytest.skip("the embedded default's one worker process runs one runner a job")
    while held := claim(job):
        for sr in held:
            leases.seed_run_finish(seed_run_id=sr.pk, worker="w1", status="succeeded",
                                   result=leases.SeedResult(scores=Scores(score=1.0)))  # fmt: skip
    made, ended, errors, inside = [], [], [], threading.Event()

    def summarize(summarized):
        made.append(summarized.id)
        inside.set()
        time.sleep(1.0)  # a big job's pass over its rows
        return job_summary(summarized)

    def finish():
        ended.append(services.job_finish_if_done(job_id=job.id, summarize=summarize))

    threads = [_thread(finish, errors)]
    assert inside.wait(10)
    threads.append(_thread(finish, errors))
    for thread in threads:
        thread.join(20)
    assert errors == [] and made == [job.id] and sorted(ended, key=str) == [None, "completed"]
    assert JobEvent.objects.filter(job=job, type="eval.policy.job.completed").count() == 1
    # Its lock is given back: a later look finds the job over, not the lock held.
    assert services.job_finish_if_done(job_id=job.id, summarize=summarize) is None


def test_redispatch_picks_jobs_without_a_live_runner_once_per_lease_period(job, settings):
    settings.EVALHUB_LEASE_S = 10
    now = timezone.now()
    assert services.jobs_redispatch(now=now) == []  # just created: its first message may be queued
    later = now + timedelta(seconds=11)
    EvalJob.objects.filter(pk=job.pk).update(runner_seen_at=now)
    assert services.jobs_redispatch(now=later) == [job.pk]
    assert services.jobs_redispatch(now=later + timedelta(seconds=1)) == []  # already handed out
    EvalJob.objects.filter(pk=job.pk).update(runner_seen_at=later + timedelta(seconds=5))
    assert services.jobs_redispatch(now=later + timedelta(seconds=12)) == []  # a runner is alive
    assert services.jobs_redispatch(now=later + timedelta(seconds=30)) == [job.pk]


def test_a_job_whose_every_sample_ended_but_that_no_one_finished_is_handed_out_again(job, settings):
    """The worker that wrote a job's last result died before it ended the job: no sample is
    open, so nothing else would ever finish it."""
    settings.EVALHUB_LEASE_S = 10
    while held := claim(job):  # three at a time
        for sr in held:
            leases.seed_run_finish(seed_run_id=sr.pk, worker="w1", status="succeeded",
                                   result=leases.SeedResult(scores=Scores(score=1.0)))  # fmt: skip
    assert not SeedRun.objects.filter(job=job).open().exists()
    now = timezone.now()
    EvalJob.objects.filter(pk=job.pk).update(runner_seen_at=now, dispatched_at=now)
    assert services.jobs_redispatch(now=now + timedelta(seconds=5)) == []  # its runner may be on it
    assert services.jobs_redispatch(now=now + timedelta(seconds=11)) == [job.pk]
    assert services.job_finish_if_done(job_id=job.id, summarize=job_summary) == "completed"
    assert services.jobs_redispatch(now=now + timedelta(seconds=30)) == []  # over


def test_cancel_closes_running_seeds_even_when_their_worker_died(job):
    (sr,) = claim(job, "w1", limit=1)
    services.job_cancel(job=job)
    sr.refresh_from_db()
    assert sr.status == "cancelled"
    assert RolloutAttempt.objects.get(seed_run=sr).status == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_cancel_does_not_wait_for_workers_writing_rows_that_reference_the_job(job):
    """Every row a worker writes for a job (an event, a seed's result, an LLM call) holds a
    key-share lock on the job row until it commits. Cancel must not wait for those: with a
    plain FOR UPDATE it did, and deadlocked with workers waiting on its seed rows."""
    if connection.vendor != "postgresql":
        pytest.skip("row lock modes are PostgreSQL's")
    locked, release = threading.Event(), threading.Event()

    def worker_writing():
        with transaction.atomic():
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT 1 FROM jobs_evaljob WHERE id = %s FOR KEY SHARE", [job.pk])
            locked.set()
            release.wait(30)
        connections.close_all()

    writer = threading.Thread(target=worker_writing)
    writer.start()
    try:
        assert locked.wait(10)

        def cancel():
            services.job_cancel(job=job)
            connections.close_all()

        cancelled = threading.Thread(target=cancel)
        cancelled.start()
        cancelled.join(20)  # blocked for good with FOR UPDATE; done at once with NO KEY
        assert not cancelled.is_alive(), "cancel waited for a worker's key-share lock"
    finally:
        release.set()
        writer.join()
    assert EvalJob.objects.get(pk=job.pk).status == "cancelled"
    assert not SeedRun.objects.filter(job=job, status="pending").exists()


def test_a_job_is_over_only_once_its_samples_are_closed_and_an_end_cut_short_is_finished(job):
    """Ending a job early is three transactions: the job marked ending, its samples closed,
    its status and event. No one sees it over with samples open. A process stopped after the
    mark leaves it ending: nothing is claimed from it, and the next to end it (cancel, fail,
    the max_failures stop, the runner finding nothing left, beat) finishes it by the rule of
    how it was ending, with one event."""
    (sr,) = claim(job, "w1", limit=1)
    now = timezone.now()
    EvalJob.objects.filter(pk=job.pk).update(completed_at=now, cancel_requested_at=now)
    SeedRun.objects.filter(pk=sr.pk).update(lease_expires_at=now)  # its worker is gone too
    assert claim(job, "w2") == [] and claims.job_left(job_id=job.id, worker="w2").claim_in is None
    shown = public.job_list_body(EvalJob.objects.get(pk=job.pk))
    assert (shown["status"], shown["completed_at"], shown["error"]) == ("running", None, None)
    # Failing it now finishes the cancel it was: failing says it did not end it.
    assert services.job_fail(job_id=job.id, error="boom") is False
    over = EvalJob.objects.get(pk=job.pk)
    assert (over.status, over.error) == ("cancelled", None)
    assert set(SeedRun.objects.filter(job=job).values_list("status", "error")) == {
        ("cancelled", "cancelled")
    }
    assert RolloutAttempt.objects.get(seed_run=sr).status == "cancelled"
    services.job_cancel(job=job)
    assert JobEvent.objects.filter(job=job, type="eval.policy.job.cancelled").count() == 1

    def started(**spec) -> EvalJob:
        created = services.job_create(owner=job.owner, spec=services.JobSpec(
            task_app_url="http://127.0.0.1:9", seeds=[1, 2, 3], **spec))  # fmt: skip
        return services.job_start(job_id=created.id)

    # A failure cut short, finished by the runner that finds nothing left to claim.
    other = started()
    EvalJob.objects.filter(pk=other.pk).update(completed_at=now, error="boom")
    assert services.job_finish_if_done(job_id=other.id, summarize=job_summary) == "failed"
    assert set(SeedRun.objects.filter(job=other).values_list("status", "error")) == {
        ("failed", "boom")
    }
    assert JobEvent.objects.filter(job=other, type="eval.policy.job.failed").count() == 1

    # Stopped for max_failures, cut short: beat finishes it once it has been a lease period.
    broken = started(max_failures=0)
    SeedRun.objects.filter(job=broken, seed=1).update(status="failed", error="boom")
    error = f"1 of 3 {stopping.MARK} (0); most common error (1x): boom"
    EvalJob.objects.filter(pk=broken.pk).update(completed_at=now, error=error)
    assert stopping.job_stop_if_broken(job_id=broken.id) is False  # ending already
    later = now + timedelta(seconds=3600)
    assert broken.id not in services.jobs_redispatch(now=later)
    assert EvalJob.objects.get(pk=broken.pk).status == "failed"
    assert sorted(SeedRun.objects.filter(job=broken).values_list("status", flat=True)) == [
        "cancelled", "cancelled", "failed"
    ]  # fmt: skip
    assert JobEvent.objects.filter(job=broken, type="eval.policy.job.failed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_cancel_and_a_workers_results_waiting_for_the_job_row_both_go_through(job, monkeypatch):
    """A worker's batch of results holds its attempts' and seeds' rows when it waits for the
    job row to claim again. Cancel held the job row while it closed those rows: each waited
    for the other, and PostgreSQL broke the cancel (every try, under a busy job). The job row
    is let go before the samples close: both finish, the results written before the close."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    first = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=2, lease_s=60.0, token_hashes=["a" * 64, "b" * 64]
    ).rollouts
    finishes = [
        leases.SeedFinish(seed_run.id, "succeeded", leases.SeedResult(scores=Scores(score=1.0)),
                          attempt=attempt_end(a.id))
        for seed_run, a in first
    ]  # fmt: skip
    holding, release, errors = threading.Event(), threading.Event(), []

    def another_claim():  # holds the job row until released
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM jobs_evaljob WHERE id = %s FOR NO KEY UPDATE", [job.pk])
            holding.set()
            release.wait(30)

    def batch():
        claims.results_write_and_claim(
            job_id=job.id, worker="w1", finishes=finishes, limit=2, lease_s=60.0,
            token_hashes=["c" * 64, "d" * 64],
        )  # fmt: skip

    threads = [_thread(another_claim, errors)]
    assert holding.wait(10)
    # One try, not job_cancel's retries: a deadlock broken and tried again is what is tested.
    monkeypatch.setattr(ending, "TRIES", 1)
    threads.append(_thread(lambda: services.job_cancel(job=job), errors))
    _until_waiting_for_locks(1)
    threads.append(_thread(batch, errors))
    _until_waiting_for_locks(2)  # the batch wrote its results and waits for the job row
    release.set()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert EvalJob.objects.get(pk=job.pk).status == "cancelled"
    statuses = sorted(SeedRun.objects.filter(job=job).values_list("status", flat=True))
    assert statuses == ["cancelled"] * 8 + ["succeeded"] * 2
    assert not RolloutAttempt.objects.filter(seed_run__job=job, status="running").exists()
    assert JobEvent.objects.filter(job=job, type="eval.policy.job.cancelled").count() == 1


def _thread(call, errors: list) -> threading.Thread:
    def run():
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the test asserts there were none
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _until_waiting_for_locks(count: int) -> None:
    """Until `count` sessions of this database wait for a lock."""
    deadline = time.monotonic() + 10
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"{count} sessions never waited for a lock")


def test_redispatch_ends_the_leases_of_a_worker_whose_heartbeats_stopped(job, settings):
    """The worker holding two seeds is gone (no heartbeat): its leases end at once and the
    job is handed out again, long before its 60 s lease would run out. A live worker's lease
    is left alone."""
    settings.EVALHUB_LEASE_S = 60
    dead = claim(job, "host:111:aaaa", limit=2)
    alive = claim(job, "host:222:bbbb", limit=1)
    EvalJob.objects.filter(pk=job.pk).update(runner_seen_at=timezone.now())
    assert services.jobs_redispatch(live={"host:222"}) == [job.pk]
    now = timezone.now()
    for seed_run in dead:
        seed_run.refresh_from_db()
        assert seed_run.status == "running" and seed_run.lease_expires_at <= now
    alive[0].refresh_from_db()
    assert alive[0].lease_expires_at > now + timedelta(seconds=50)
    # Taken over by the next claim, as a loss (not charged to the task app).
    taken = claim(job, "host:222:cccc", limit=3)
    assert {sr.pk for sr in dead} <= {sr.pk for sr in taken}
    assert all(sr.losses == 1 for sr in taken if sr.pk in {d.pk for d in dead})
    # Nobody is taken for dead when the heartbeats cannot be read.
    assert services.jobs_redispatch(live=None) == []


@pytest.mark.django_db(transaction=True)
def test_workers_writing_a_jobs_events_at_once_take_their_numbers_in_turn(job):
    """Two transactions appending events to one job (two workers' batches of results): the
    second waits for the first's numbers, then writes its own once. Reading the same last
    number, it wrote, waited for the first to commit, failed and wrote again."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    holding, release, errors, inserts = threading.Event(), threading.Event(), [], []

    def first():
        with transaction.atomic():
            events.job_event_append(job_id=job.id, type=events.EventType.ENVIRONMENT_BUSY, data={})
            holding.set()
            release.wait(30)

    def second():
        with CaptureQueriesContext(connection) as queries:
            events.job_event_append(job_id=job.id, type=events.EventType.ENVIRONMENT_BUSY, data={})
        inserts.append(sum(q["sql"].startswith('INSERT INTO "jobs_jobevent"') for q in queries))

    threads = [_thread(first, errors)]
    assert holding.wait(10)
    threads.append(_thread(second, errors))
    _until_waiting_for_locks(1)
    release.set()
    for thread in threads:
        thread.join(20)
    assert errors == [] and inserts == [1]
    numbers = list(JobEvent.objects.filter(job=job).order_by("seq").values_list("seq", flat=True))
    assert numbers == list(range(1, len(numbers) + 1))
