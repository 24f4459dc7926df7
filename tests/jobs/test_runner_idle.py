"""A runner with nothing in flight while other workers hold the rest of its job."""

from __future__ import annotations

import threading
import time

import pytest

from jobs import leases, services
from jobs.models import EvalJob, SeedRun
from jobs.scores import Scores
from jobs.worker import runner
from tests.jobs.conftest import claim
from traces.results.result_rows import job_summary

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_runner_waiting_on_other_workers_leases_is_free_soon_after_the_job_ends(job):
    """The last samples of a job are leased to another worker: the runner has nothing to claim
    and waits for them. Once that worker ends the job, the runner's thread (one of a Celery
    worker's) is free within seconds; it slept a third of a lease (20 s) before it looked again,
    held the thread that long after the job ended, and kept a warm shutdown waiting."""
    held = claim(job, "w9", limit=3)
    SeedRun.objects.filter(job=job, status="pending").update(status="succeeded")
    thread = threading.Thread(target=runner.job_run, kwargs={"job_id": job.id})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while EvalJob.objects.get(pk=job.pk).runner_seen_at is None:  # its first turn
            assert time.monotonic() < deadline, "the runner never started"
            time.sleep(0.05)
        time.sleep(1.0)  # past its first look at what is left: waiting
        for seed_run in held:  # the other worker's last results, and the job's end
            leases.seed_run_finish(seed_run_id=seed_run.pk, worker="w9", status="succeeded",
                                   result=leases.SeedResult(scores=Scores(score=1.0)))  # fmt: skip
        assert services.job_finish_if_done(job_id=job.id, summarize=job_summary) == "completed"
        thread.join(6)
        assert not thread.is_alive()
    finally:
        thread.join(30)
