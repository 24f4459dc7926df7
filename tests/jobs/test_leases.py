"""The worker's side of a job: claims (jobs.claims), leases, results (jobs.leases)."""

from __future__ import annotations

import threading
from datetime import timedelta

import orjson
import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import claims, leases, services
from jobs.events import LAST_SEED_EVENT_WITHIN, EventType, job_event_append
from jobs.figures import JsonText
from jobs.models import EvalJob, JobEvent, RolloutAttempt, SeedRun
from jobs.scores import Scores
from tests.jobs.conftest import attempt_of, claim, runner_claim
from tests.support.jobs import attempt_end

pytestmark = pytest.mark.django_db


def test_claims_never_exceed_max_concurrent_over_all_workers(job):
    first = claim(job, "w1", limit=2)
    second = claim(job, "w2", limit=5)
    third = claim(job, "w3", limit=5)
    assert len(first) == 2 and len(second) == 1 and third == []
    assert {sr.lease_owner for sr in first} == {"w1"}
    assert all(sr.status == "running" and sr.attempts == 1 for sr in first + second)
    assert len({sr.id for sr in first + second}) == 3


def test_a_claim_says_whether_the_job_had_room_for_another_runner(job):
    """Ten seeds, three at a time: a claim limited below the job's free slots says another
    runner could take more; one that took every free slot, or every seed left, does not."""
    first = runner_claim(job, "w1", 1)
    assert len(first.rollouts) == 1 and first.room
    second = runner_claim(job, "w2", 5)
    assert len(second.rollouts) == 2 and not second.room  # max_concurrent reached
    SeedRun.objects.filter(job=job, status="pending").exclude(seed=9).update(status="cancelled")
    for seed_run in SeedRun.objects.filter(job=job, status="running"):
        leases.seed_run_finish(seed_run_id=seed_run.pk, worker=seed_run.lease_owner,
                               status="succeeded", result=leases.SeedResult())  # fmt: skip
    last = runner_claim(job, "w3", 1)
    assert [c.seed for c, _ in last.rollouts] == [9] and not last.room  # nothing else left


def test_what_is_left_of_a_job_for_a_runner(job):
    assert claims.job_left(job_id=job.id, worker="w1").claim_in == 0.0  # pending seeds
    held = claim(job, "w1", limit=3)
    SeedRun.objects.filter(job=job, status="pending").update(status="cancelled")
    left = claims.job_left(job_id=job.id, worker="w2")
    # Only w1's leases are open: w2 could take them over when they expire, in about 60 s.
    assert left.held_elsewhere and 55 < left.claim_in <= 60
    assert not claims.job_left(job_id=job.id, worker="w1").held_elsewhere
    for seed_run in held:
        leases.seed_run_finish(seed_run_id=seed_run.pk, worker="w1",
                               status="succeeded", result=leases.SeedResult())  # fmt: skip
    assert (
        claims.job_left(job_id=job.id, worker="w1").claim_in is None
    )  # nothing open: the job ends


def test_claim_skips_seed_runs_held_by_a_live_lease_and_takes_expired_ones(job):
    held = claim(job, "w1", limit=3)
    SeedRun.objects.filter(pk=held[0].pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    attempt = attempt_of(held[0])
    taken = claim(job, "w2", limit=5)
    assert [sr.pk for sr in taken] == [held[0].pk]
    # The lost attempt was our fault: a loss, not one of the task app's attempts.
    assert taken[0].attempts == 2 and taken[0].losses == 1 and taken[0].failures == 0
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
    assert held.status == "failed" and held.losses == 3 and held.attempts == 3
    assert "lost with its worker 3 times" in held.error and "never the cause" in held.error
    assert held.lease_owner == "" and held.lease_expires_at is None and held.finished_at
    [event] = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed")
    assert (event.data["seed"], event.data["status"], event.data["completed"]) == (
        held.seed, "failed", 1,
    )  # fmt: skip


def test_a_seed_tried_again_numbers_its_next_attempt_and_our_fault_is_a_loss(job):
    (seed_run,) = claim(job, "w1", limit=1)
    first = attempt_of(seed_run)
    assert first.number == 1 == seed_run.attempts and first.worker == "w1"
    assert leases.seed_run_retry_later(
        seed_run_id=seed_run.pk, worker="w1", delay_s=0, error="evalhub down", charged=False
    )
    (again,) = [sr for sr in claim(job, "w2", limit=3) if sr.pk == seed_run.pk]
    second = attempt_of(again)
    assert second.number == 2 and second.worker == "w2"
    assert (again.attempts, again.failures, again.losses) == (2, 0, 1)
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
    SeedRun.objects.filter(pk=b.pk).update(lease_owner="w2")  # taken over
    assert leases.seed_run_lease_renew(seed_run_ids=[a.pk, b.pk], worker="w1", lease_s=60) == {a.pk}
    services.job_cancel(job=job)
    # Cancelling closes what runners hold too: renewal tells them to stop.
    assert leases.seed_run_lease_renew(seed_run_ids=[a.pk], worker="w1", lease_s=60) == set()
    assert claim(job, "w2") == []  # a cancelled job gives out nothing


def test_a_runners_claim_starts_an_attempt_of_each_seed_it_claims(job):
    """The runner's claim: seed runs and their attempts in one transaction, a token hash each
    (those left over unused), numbered on from the seed's attempts."""
    hashes = [f"{n}" * 64 for n in range(5)]
    first = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=5, lease_s=60.0, token_hashes=hashes
    )
    assert len(first.rollouts) == 3 and not first.room  # max_concurrent is 3
    for seed_run, started in first.rollouts:
        row = SeedRun.objects.get(pk=seed_run.id)
        assert (row.status, row.lease_owner, row.attempts) == ("running", "w1", 1)
        assert (seed_run.seed, seed_run.attempts, seed_run.failures) == (row.seed, 1, 0)
        attempt = RolloutAttempt.objects.get(pk=started.id)
        assert (attempt.seed_run_id, attempt.number, attempt.run_id) == (seed_run.id, 1,
                                                                         started.run_id)  # fmt: skip
        assert started.number == 1 and started.run_id.startswith("run-")
        assert (attempt.worker, attempt.status, attempt.llm_calls_admitted) == ("w1", "running", 0)
        assert attempt.started_at is not None and attempt.finished_at is None
    started = [RolloutAttempt.objects.get(pk=a.id) for _, a in first.rollouts]
    assert [a.token_hash for a in started] == hashes[:3]
    assert RolloutAttempt.objects.count() == 3
    # Its lease expired: the next claim takes it over, with its second attempt.
    taken_id = first.rollouts[0][0].id
    SeedRun.objects.filter(pk=taken_id).update(lease_expires_at=timezone.now())
    again = claims.rollouts_claim(
        job_id=job.id, worker="w2", limit=1, lease_s=60.0, token_hashes=["f" * 64]
    )
    [(seed_run, attempt)] = again.rollouts
    assert seed_run.id == taken_id and attempt.number == 2 and seed_run.losses == 1
    statuses = RolloutAttempt.objects.filter(seed_run_id=taken_id).order_by("number")
    assert list(statuses.values_list("status", flat=True)) == ["abandoned", "running"]
    held = claims.rollouts_claim(
        job_id=job.id, worker="w3", limit=2, lease_s=60.0, token_hashes=["e" * 64] * 2
    )
    assert held.rollouts == []  # max_concurrent held


def test_results_written_together_are_one_event_each_in_order_and_only_if_still_held(job):
    claimed = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=3, lease_s=60.0,
        token_hashes=["a" * 64, "b" * 64, "c" * 64],
    ).rollouts  # fmt: skip
    held = [SeedRun.objects.get(pk=seed_run.id) for seed_run, _ in claimed]
    started = [attempt for _, attempt in claimed]
    assert [a.number for a in started] == [1, 1, 1]
    assert len({a.run_id for a in started}) == 3
    # The third seed was taken over meanwhile: its result is refused, the others are written.
    SeedRun.objects.filter(pk=held[2].pk).update(lease_owner="w2")
    finishes = [
        leases.SeedFinish(
            sr.pk,
            "succeeded",
            leases.SeedResult(scores=Scores(score=n / 4)),
            attempt=attempt_end(a.id),
        )  # fmt: skip
        for n, (sr, a) in enumerate(zip(held, started, strict=True))
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


def test_a_batch_of_results_takes_the_slots_of_its_workers_rollouts_over_but_not_written(job):
    """A batch of results claims for its own slots and for those of the rollouts its worker
    names as over (ended while it was written, their results in the next batch): their seeds
    are still running under its leases, yet hold no slot at the task app. Not while another
    worker holds one of the job's seeds: its claims could not know of them."""
    hashes = iter(f"{n:064x}" for n in range(100))
    (first, ended), (second, _), (third, _) = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=3, lease_s=60.0, token_hashes=[next(hashes) for _ in range(3)],
    ).rollouts  # fmt: skip
    result = leases.SeedFinish(first.id, "succeeded", leases.SeedResult(),
                               attempt=attempt_end(ended.id))  # fmt: skip
    asked, more = [], next(hashes)

    def also_over():
        asked.append(SeedRun.objects.get(pk=first.id).status)  # after the results' write
        return [second.id], [more]

    written, claim, over = claims.results_write_and_claim(
        job_id=job.id, worker="w1", finishes=[result], limit=1, lease_s=60.0,
        token_hashes=[next(hashes)], also_over=also_over,
    )  # fmt: skip
    assert written == [True] and asked == ["succeeded"] and over == [second.id]
    # max_concurrent 3, three running: the third, and the second's slot and the first's taken.
    assert len(claim.rollouts) == 2
    started = RolloutAttempt.objects.filter(pk__in=[a.id for _, a in claim.rollouts])
    assert more in set(started.values_list("token_hash", flat=True))
    # Its result is not written yet: the second seed runs on, under w1's lease.
    assert SeedRun.objects.get(pk=second.id).status == "running"

    # Another worker holds a seed: the second's slot stays held, the batch takes its own.
    SeedRun.objects.filter(pk__in=[sr.id for sr, _ in claim.rollouts]).update(
        status="pending", lease_owner="", lease_expires_at=None
    )
    SeedRun.objects.filter(pk=third.id).update(lease_owner="w2")
    _, alone, none = claims.results_write_and_claim(
        job_id=job.id, worker="w1", finishes=[], limit=1, lease_s=60.0,
        token_hashes=[next(hashes)], also_over=lambda: ([second.id], [next(hashes)]),
    )  # fmt: skip
    assert len(alone.rollouts) == 1 and none == []


def test_a_runner_alone_on_a_job_claims_ahead_and_says_no_room_for_it(job):
    """`ahead` more than `max_concurrent` are claimed while no other worker holds one of the
    job's seeds (they wait at the runner's gate for the task app's room), and never counted as
    room for another runner; none once another worker holds a seed. Both claims, the general
    one and PostgreSQL's statement, count it the same way."""
    hashes = iter(f"{n:064x}" for n in range(100))

    def claimed(worker: str, limit: int, ahead: int) -> claims.RolloutClaim:
        return claims.rollouts_claim(
            job_id=job.id, worker=worker, limit=limit, lease_s=60.0, ahead=ahead,
            token_hashes=[next(hashes) for _ in range(limit)],
        )  # fmt: skip

    first = claimed("w1", 2, ahead=2)
    assert len(first.rollouts) == 2 and first.room  # one slot of max_concurrent 3 left
    second = claimed("w1", 5, ahead=2)
    assert len(second.rollouts) == 3 and not second.room  # 3 + 2 ahead, no room for others
    assert claimed("w1", 5, ahead=2).rollouts == []
    assert SeedRun.objects.filter(job=job, status="running", lease_owner="w1").count() == 5
    # Another worker holds a seed: no claim ahead, and five running leave nothing for anyone.
    SeedRun.objects.filter(pk=first.rollouts[0][0].id).update(lease_owner="w2")
    SeedRun.objects.filter(pk__in=[sr.id for sr, _ in second.rollouts]).update(
        status="pending", lease_owner="", lease_expires_at=None
    )
    assert len(claimed("w1", 5, ahead=2).rollouts) == 1  # max_concurrent 3, two running


def test_a_batch_says_no_slot_was_free_when_a_named_rollout_held_none(job):
    """A seed run named as over that is no longer the worker's running one (its lease lost and
    the seed given back meanwhile) holds no slot: the claim takes the slots of those that did,
    and says none was free, so the runner counts them held a batch longer and claims less,
    never more."""
    hashes = iter(f"{n:064x}" for n in range(100))
    claimed = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=3, lease_s=60.0, token_hashes=[next(hashes) for _ in range(3)],
    ).rollouts  # fmt: skip
    ended = claimed[1][0]
    given_back = SeedRun.objects.filter(job=job, status="pending").order_by("-id").first()
    _, claim, over = claims.results_write_and_claim(
        job_id=job.id, worker="w1", finishes=[], limit=0, lease_s=60.0, token_hashes=[],
        also_over=lambda: ([ended.id, given_back.id], [next(hashes), next(hashes)]),
    )  # fmt: skip
    # max_concurrent 3, three running: one of the two named held a slot, and one seed took it.
    assert len(claim.rollouts) == 1 and over == []
    assert SeedRun.objects.filter(job=job, status="running").count() == 4


def test_a_claim_holds_the_job_row_for_one_statement_on_postgresql(job):
    """Once a claim has the job row's lock, every other claim of the job waits: on PostgreSQL
    the running seeds' count, the claim and the attempts' start are one statement before the
    commit (jobs.claim_statement), with nothing of Python's between them."""
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement claim is PostgreSQL's")
    hashes = [f"{n}" * 64 for n in range(5)]
    with CaptureQueriesContext(connection) as queries:
        got = claims.rollouts_claim(
            job_id=job.id, worker="w1", limit=5, lease_s=60.0, token_hashes=hashes
        )
    sql = [q["sql"] for q in queries.captured_queries]
    locked = next(n for n, s in enumerate(sql) if s.rstrip().endswith("FOR NO KEY UPDATE"))
    assert sql[locked + 2].startswith("RELEASE SAVEPOINT")  # the claim's transaction ends
    assert len(got.rollouts) == 3 and not got.room  # max_concurrent is 3
    rows = SeedRun.objects.filter(pk__in=[sr.id for sr, _ in got.rollouts])
    assert set(rows.values_list("status", "lease_owner", "attempts")) == {("running", "w1", 1)}
    for seed_run, started in got.rollouts:
        attempt = RolloutAttempt.objects.get(pk=started.id)
        assert (attempt.seed_run_id, attempt.number, attempt.run_id, attempt.status) == (
            seed_run.id, 1, started.run_id, "running")  # fmt: skip
    assert sorted(a.token_hash for a in RolloutAttempt.objects.all()) == hashes[:3]


@pytest.mark.django_db(transaction=True)
def test_claims_racing_on_postgresql_never_pass_max_concurrent(job):
    """Claims of one job from many threads at once: each counts the running seeds after it
    has the job row's lock (a statement's snapshot taken before the lock would miss the
    claims committed while it waited)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    EvalJob.objects.filter(pk=job.pk).update(max_concurrent=4)
    fresh = iter(f"{n:064x}" for n in range(1000))
    hashes = [[next(fresh) for _ in range(3)] for _ in range(8)]
    got: list[int] = []
    start = threading.Barrier(8)

    def claim_some(mine: list[str]) -> None:
        try:
            start.wait(10)
            rollouts = claims.rollouts_claim(
                job_id=job.id, worker="w", limit=3, lease_s=60.0, token_hashes=mine
            ).rollouts
            got.extend(sr.id for sr, _ in rollouts)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim_some, args=(mine,)) for mine in hashes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == len(set(got)) == 4
    assert SeedRun.objects.filter(job=job, status="running").count() == 4
    assert RolloutAttempt.objects.count() == 4


def test_a_seed_taken_again_by_its_own_worker_gets_one_result_from_its_new_attempt(job):
    """The database was away longer than a lease: renewals failed, the lease ran out and the
    worker's next claim took the seed again, a second attempt, while the first still ran.
    Both results can reach one batch: only the running attempt's is written, with one event;
    the abandoned attempt's result and its retry are refused."""
    fresh = iter(f"{n}" * 64 for n in range(4))
    [(seed_run, first)] = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=1, lease_s=60.0, token_hashes=[next(fresh)]
    ).rollouts
    SeedRun.objects.filter(pk=seed_run.id).update(lease_expires_at=timezone.now())
    again = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=1, lease_s=60.0, token_hashes=[next(fresh)]
    ).rollouts
    [(taken, second)] = [(sr, a) for sr, a in again if sr.id == seed_run.id]
    assert (first.number, second.number) == (1, 2)

    def finish(attempt, score: float) -> leases.SeedFinish:
        end = attempt_end(attempt.id)
        return leases.SeedFinish(seed_run.id, "succeeded",
                                 leases.SeedResult(scores=Scores(score=score)), attempt=end)  # fmt: skip

    assert not leases.seed_run_retry_later(
        seed_run_id=seed_run.id, worker="w1", delay_s=0, error="HTTP 503",
        attempt=attempt_end(first.id, "failed"),
    )  # fmt: skip
    assert SeedRun.objects.get(pk=seed_run.id).status == "running"
    written = leases.seed_runs_finish(
        worker="w1", finishes=[finish(first, 0.0), finish(second, 1.0)]
    )
    assert written == [False, True]
    row = SeedRun.objects.get(pk=seed_run.id)
    assert (row.status, row.score, row.attempts, row.failures) == ("succeeded", 1.0, 2, 0)
    events = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed")
    assert [(e.data["seed"], e.data["attempts"]) for e in events] == [(row.seed, 2)]
    ends = RolloutAttempt.objects.filter(seed_run_id=seed_run.id).order_by("number")
    assert list(ends.values_list("status", flat=True)) == ["abandoned", "succeeded"]


def test_a_batch_of_results_claims_the_slots_it_frees_in_its_own_transaction(job):
    """Results written and their slots taken again at once: `max_concurrent` (3) counts the
    seeds just finished as free, never the one another runner holds, and a result that is not
    written (its lease taken over) frees nothing."""
    first = claims.rollouts_claim(
        job_id=job.id, worker="w1", limit=2, lease_s=60.0, token_hashes=["a" * 64, "b" * 64]
    ).rollouts
    [other] = claim(job, "w2", limit=1)
    finishes = [
        leases.SeedFinish(seed_run.id, "succeeded", leases.SeedResult(scores=Scores(score=1.0)),
                          attempt=attempt_end(a.id))
        for seed_run, a in first
    ]  # fmt: skip
    hashes = [f"{n}" * 64 for n in range(3)]
    written, again, _ = claims.results_write_and_claim(
        job_id=job.id, worker="w1", finishes=finishes, limit=3, lease_s=60.0, token_hashes=hashes
    )
    assert written == [True, True]
    assert len(again.rollouts) == 2  # three asked for; w2 holds the third slot
    for seed_run, started in again.rollouts:
        row = SeedRun.objects.get(pk=seed_run.id)
        assert (row.status, row.lease_owner, row.attempts) == ("running", "w1", 1)
        assert RolloutAttempt.objects.get(pk=started.id).token_hash in hashes[:2]
    assert {sr.id for sr, _ in again.rollouts}.isdisjoint({sr.id for sr, _ in first} | {other.id})
    done = SeedRun.objects.filter(pk__in=[sr.id for sr, _ in first])
    assert set(done.values_list("status", "score")) == {("succeeded", 1.0)}
    events = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed")
    assert sorted(e.data["completed"] for e in events) == [1, 2]
    # Taken over meanwhile: the result is refused and its slot stays the other runner's.
    taken, _ = again.rollouts[0]
    SeedRun.objects.filter(pk=taken.id).update(lease_owner="w3")
    refused = leases.SeedFinish(taken.id, "failed", leases.SeedResult(error="x"))
    written, none, _ = claims.results_write_and_claim(
        job_id=job.id, worker="w1", finishes=[refused], limit=1, lease_s=60.0,
        token_hashes=["f" * 64],
    )  # fmt: skip
    assert written == [False] and none.rollouts == []
    assert SeedRun.objects.get(pk=taken.id).status == "running"


def test_a_batch_of_results_costs_the_same_round_trips_whatever_its_size(job):
    """A worker's batch of results and the claim of its slots is a fixed number of statements
    (each a round trip on PostgreSQL, where a busy worker waits for every one): no locking read
    of the seed runs before their UPDATE, no savepoint for the events' numbering on PostgreSQL
    (its lock takes the numbers one transaction at a time; SQLite keeps one), and the events'
    numbering and progress read by one statement."""

    EvalJob.objects.filter(pk=job.id).update(max_concurrent=10)
    fresh = (f"{n:064x}" for n in range(100))

    def batch(limit: int) -> list[str]:
        started = claims.rollouts_claim(
            job_id=job.id, worker="w1", limit=limit, lease_s=60.0,
            token_hashes=[next(fresh) for _ in range(limit)],
        ).rollouts  # fmt: skip
        finishes = [
            leases.SeedFinish(seed_run.id, "succeeded", leases.SeedResult(scores=Scores(score=1)),
                              attempt=attempt_end(a.id))
            for seed_run, a in started
        ]  # fmt: skip
        with CaptureQueriesContext(connection) as queries:
            written, _, _ = claims.results_write_and_claim(
                job_id=job.id, worker="w1", finishes=finishes, limit=1, lease_s=60.0,
                token_hashes=[next(fresh)],
            )  # fmt: skip
        assert written == [True] * limit
        return [q["sql"] for q in queries.captured_queries]

    batch(1)  # a job's first seed event counts the seeds over (a statement more, once)
    one, three = batch(1), batch(3)
    # The test runs in a transaction: the batch's own transaction is a savepoint in it.
    ours = 1 if connection.in_atomic_block else 0
    numbering = 0 if connection.vendor == "postgresql" else 1
    for sql in (one, three):
        assert sum(s.startswith("SAVEPOINT") for s in sql) == numbering + ours
        assert not any("jobs_seedrun" in s.split(" FROM ")[-1] and "FOR UPDATE" in s for s in sql)
        assert sum("jobs_jobevent" in s and s.startswith("SELECT") for s in sql) == 1
    if connection.vendor == "postgresql":  # SQLite returns an UPDATE's rows one row at a time
        assert len(one) == len(three)
    events = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed").order_by("seq")
    assert [e.data["completed"] for e in events] == [1, 2, 3, 4, 5]


def test_progress_is_counted_again_when_the_last_seed_event_is_far_back(job):
    """The last seed event is looked for among the job's last LAST_SEED_EVENT_WITHIN events;
    further back (many other events since), the seeds over are counted instead: the same."""
    for n in range(3):
        [held] = claim(job, "w1", limit=1)
        finish = leases.SeedFinish(held.pk, "failed", leases.SeedResult(error="x"))
        assert leases.seed_runs_finish(worker="w1", finishes=[finish]) == [True]
        others = LAST_SEED_EVENT_WITHIN + 1 if n == 1 else 1
        for _ in range(others):
            job_event_append(job_id=job.id, type=EventType.ENVIRONMENT_BUSY, data={})
    events = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed").order_by("seq")
    assert [e.data["completed"] for e in events] == [1, 2, 3]


def test_progress_counts_on_from_the_last_seed_event_and_from_the_seeds_a_job_starts_with(job):
    """A job's first seed event counts the seeds over (two a rerun reused, without events of
    their own); each later one counts on from the last seed event, batch after batch, other
    events between them."""
    SeedRun.objects.filter(job=job, seed__in=[8, 9]).update(status="succeeded")
    for limit in (2, 1, 3):
        held = claim(job, "w1", limit=limit)
        finishes = [leases.SeedFinish(sr.pk, "failed", leases.SeedResult(error="x")) for sr in held]
        assert leases.seed_runs_finish(worker="w1", finishes=finishes) == [True] * limit
        job_event_append(job_id=job.id, type=EventType.ENVIRONMENT_BUSY, data={"n": limit})
    events = JobEvent.objects.filter(job=job, type="eval.policy.seed.completed").order_by("seq")
    assert [e.data["completed"] for e in events] == [3, 4, 5, 6, 7, 8]
    assert {e.data["total"] for e in events} == {10}
    assert SeedRun.objects.filter(job=job, status__in=["succeeded", "failed"]).count() == 8


def test_a_result_kept_as_json_text_is_written_as_it_is(job):
    """A big answer's metrics and trace reach the database as the JSON text the worker made of
    them (jobs.figures.JsonText), beside results written as values, in one statement."""
    held = claim(job, "w1", limit=2)
    trace = {"messages": [{"role": "user", "content": "é ☃ \U0001f600"}], "steps": [1, 2.5]}
    metrics = {"outcome_reward": 0.5, "details": {"note": "ok"}}
    as_text = leases.SeedResult(
        scores=Scores(score=0.5),
        metrics=JsonText(orjson.dumps(metrics).decode()),
        task_trace=JsonText(orjson.dumps(trace).decode()),
    )
    as_values = leases.SeedResult(scores=Scores(score=0.5), metrics=metrics, task_trace=trace)
    finishes = [
        leases.SeedFinish(held[0].pk, "succeeded", as_text),
        leases.SeedFinish(held[1].pk, "succeeded", as_values),
    ]
    assert leases.seed_runs_finish(worker="w1", finishes=finishes) == [True, True]
    for seed_run in held:
        seed_run.refresh_from_db()
        assert (seed_run.metrics, seed_run.task_trace) == (metrics, trace)
    # Its JSON can be looked into like any other's.
    found = SeedRun.objects.filter(job=job, task_trace__messages__0__role="user")
    assert found.count() == 2


def test_a_cancel_during_a_retrys_backoff_leaves_no_seed_pending(job):
    # A seed put back to pending for a retry (its backoff running), then the job cancelled, and
    # the runner that held it writing its retry late: every seed ends cancelled, none pending.
    held, late = claim(job, "w1", limit=2)
    assert leases.seed_run_retry_later(
        seed_run_id=held.pk, worker="w1", delay_s=3600, error="HTTP 503"
    )
    services.job_cancel(job=job)
    assert not leases.seed_run_retry_later(
        seed_run_id=late.pk, worker="w1", delay_s=0, error="HTTP 503"
    )
    statuses = set(SeedRun.objects.filter(job=job).values_list("status", flat=True))
    assert statuses == {"cancelled"}
    assert claim(job, "w2") == []
