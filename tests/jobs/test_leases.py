"""The worker's side of a job: claims, leases, results."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import leases, services
from jobs.models import JobEvent, RolloutAttempt, RunnerWait, SeedRun
from jobs.scores import Scores
from tests.jobs.conftest import claim

pytestmark = pytest.mark.django_db


def test_claims_never_exceed_max_concurrent_over_all_workers(job):
    first = claim(job, "w1", limit=2)
    second = claim(job, "w2", limit=5)
    third = claim(job, "w3", limit=5)
    assert len(first) == 2 and len(second) == 1 and third == []
    assert {sr.lease_owner for sr in first} == {"w1"}
    assert all(sr.status == "running" and sr.attempts == 0 for sr in first + second)
    assert len({sr.id for sr in first + second}) == 3


def test_a_runner_waiting_for_slots_gets_its_share_as_the_holders_rollouts_end(job):
    def finish(seed_run, worker):
        assert leases.seed_run_finish(seed_run_id=seed_run.pk, worker=worker,
                                      status="succeeded", result=leases.SeedResult())  # fmt: skip

    first = claim(job, "w1")
    assert len(first) == 3 and claim(job, "w2") == []  # w2 waits: it counts from now on
    finish(first[0], "w1")
    # w1 holds two, its share of three between two runners: the free slot is left to w2.
    again = leases.seed_run_claim(job_id=job.id, worker="w1", limit=3, lease_s=60.0)
    assert again.seed_runs == [] and again.share == 2
    second = claim(job, "w2")
    assert len(second) == 1
    # A runner that stopped asking stops counting: its part goes back to the others.
    finish(first[1], "w1"), finish(second[0], "w2")
    RunnerWait.objects.filter(worker="w2").update(
        seen_at=timezone.now() - timedelta(seconds=leases.RUNNER_WAIT_S + 1)
    )
    assert len(claim(job, "w1")) == 2


def test_claim_skips_seed_runs_held_by_a_live_lease_and_takes_expired_ones(job):
    held = claim(job, "w1", limit=3)
    SeedRun.objects.filter(pk=held[0].pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    attempt = leases.rollout_attempt_start(seed_run=held[0], token_hash="a" * 64)
    taken = claim(job, "w2", limit=5)
    assert [sr.pk for sr in taken] == [held[0].pk]
    # The lost attempt was our fault: a loss, not one of the task app's attempts.
    assert taken[0].attempts == 1 and taken[0].losses == 1 and taken[0].failures == 0
    assert taken[0].lease_owner == "w2"
    attempt.refresh_from_db()
    assert attempt.status == "abandoned" and attempt.finished_at is not None
    # w1's late result is refused: the seed is no longer its own
    assert not leases.seed_run_finish(
        seed_run_id=held[0].pk,
        worker="w1",
        status="succeeded",
        result=leases.SeedResult(scores=Scores(score=1)),
    )
    assert leases.seed_run_finish(
        seed_run_id=held[0].pk,
        worker="w2",
        status="succeeded",
        result=leases.SeedResult(scores=Scores(score=0.5)),
    )
    assert SeedRun.objects.get(pk=held[0].pk).score == 0.5
    assert JobEvent.objects.filter(job=job, type="eval.policy.seed.completed").count() == 1


def test_losing_the_worker_never_uses_up_the_task_apps_attempts(job, settings):
    settings.EVALHUB_ROLLOUT_MAX_ATTEMPTS = 1
    settings.EVALHUB_SEED_MAX_LOSSES = 3
    owner = "w0"
    (held,) = claim(job, owner, limit=1)
    for n in (1, 2):  # two workers die holding it: still claimable, by the next worker
        leases.rollout_attempt_start(seed_run=held, token_hash=f"{n}" * 64, worker=owner)
        SeedRun.objects.filter(pk=held.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        owner = f"w{n}"
        (taken,) = [sr for sr in claim(job, owner, limit=1) if sr.pk == held.pk]
        assert (taken.losses, taken.failures, taken.status) == (n, 0, "running")
    SeedRun.objects.filter(pk=held.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert held.pk not in [sr.pk for sr in claim(job, "w9", limit=1)]
    held.refresh_from_db()
    assert held.status == "failed" and held.losses == 3 and held.attempts == 2
    assert "lost with its worker 3 times" in held.error and "never the cause" in held.error


def test_attempts_count_attempts_not_claims(job):
    (seed_run,) = claim(job, "w1", limit=1)
    assert seed_run.attempts == 0
    first = leases.rollout_attempt_start(seed_run=seed_run, token_hash="a" * 64, worker="w1")
    assert first.number == 1 == seed_run.attempts
    assert leases.seed_run_retry_later(
        seed_run_id=seed_run.pk, worker="w1", delay_s=0, error="evalhub down", charged=False
    )
    (again,) = [sr for sr in claim(job, "w2", limit=3) if sr.pk == seed_run.pk]
    second = leases.rollout_attempt_start(seed_run=again, token_hash="b" * 64, worker="w2")
    assert second.number == 2 and (again.attempts, again.failures, again.losses) == (2, 0, 1)
    assert RolloutAttempt.objects.filter(seed_run=seed_run).count() == 2


def test_retry_later_respects_the_backoff(job):
    (seed_run,) = claim(job, "w1", limit=1)
    assert leases.seed_run_retry_later(
        seed_run_id=seed_run.pk, worker="w1", delay_s=3600, error="HTTP 503"
    )
    taken = claim(job, "w2", limit=10)
    assert seed_run.pk not in [sr.pk for sr in taken]
    SeedRun.objects.filter(pk=seed_run.pk).update(not_before=timezone.now())
    for sr in taken:
        leases.seed_run_finish(
            seed_run_id=sr.pk,
            worker="w2",
            status="succeeded",
            result=leases.SeedResult(scores=Scores(score=1)),
        )
    again = claim(job, "w3", limit=10)
    assert seed_run.pk in [sr.pk for sr in again]
    assert SeedRun.objects.get(pk=seed_run.pk).failures == 1  # charged to the task app


def test_lease_renewal_reports_seeds_no_longer_held(job):
    a, b = claim(job, "w1", limit=2)
    services.job_cancel(job=job)
    SeedRun.objects.filter(pk=b.pk).update(status="cancelled")
    assert leases.seed_run_lease_renew(seed_run_ids=[a.pk, b.pk], worker="w1", lease_s=60) == {a.pk}
    assert claim(job, "w2") == []  # a cancelled job gives out nothing


def test_results_written_together_are_one_event_each_in_order_and_only_if_still_held(job):
    held = claim(job, "w1", limit=3)
    attempts = leases.rollout_attempts_start(
        seed_runs=held, token_hashes=["a" * 64, "b" * 64, "c" * 64], worker="w1"
    )
    assert [a.number for a in attempts] == [1, 1, 1]
    assert [a.seed_run_id for a in attempts] == [sr.pk for sr in held]
    # The third seed was taken over meanwhile: its result is refused, the others are written.
    SeedRun.objects.filter(pk=held[2].pk).update(lease_owner="w2")
    finishes = [
        leases.SeedFinish(
            sr.pk,
            "succeeded",
            leases.SeedResult(scores=Scores(score=n / 4)),
            attempt=leases.AttemptEnd(attempt_id=a.pk, status="succeeded"),
        )  # fmt: skip
        for n, (sr, a) in enumerate(zip(held, attempts, strict=True))
    ]
    assert leases.seed_runs_finish(worker="w1", finishes=finishes) == [True, True, False]
    events = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed").order_by("seq")
    assert [(e.data["seed"], e.data["score"], e.data["completed"]) for e in events] == [
        (held[0].seed, 0.0, 1),
        (held[1].seed, 0.25, 2),
    ]
    assert all(e.data["total"] == job.num_seeds for e in events)
    # Every attempt that ended is recorded, written or not: it was spent.
    assert set(RolloutAttempt.objects.values_list("status", flat=True)) == {"succeeded"}
