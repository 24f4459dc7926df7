"""A running job's zip members are built by the workers as its seeds end (its runners send
`traces.job_members_build`), so the zip of the job that ends is assembled from them. A real
worker process, a real task app."""

from __future__ import annotations

import pytest

from jobs.models import EvalJob
from tests.support.jobs import FAST, job_create, job_wait
from tests.support.servers import serve_asgi, wait_until
from tests.support.task_app import task_app_create
from traces.models import TraceMember

pytestmark = pytest.mark.worker


def test_members_are_built_while_the_job_runs_and_its_zip_assembled_from_them(
    client_alice, worker_factory
):
    app, _ = task_app_create(delay_s=0.1)
    with serve_asgi(app) as url:
        worker_factory(concurrency=2, EVALHUB_TRACES_ZIP_AFTER_S="1", **FAST)
        # 100 rollouts of 0.1 s, two at a time: the job runs for 5 s or more.
        job_id = job_create(client_alice, url, seeds=list(range(100)), max_concurrent=2)
        kept = TraceMember.objects.filter(seed_run__job_id=job_id)

        def kept_while_running() -> int | None:
            count = kept.count()
            status = EvalJob.objects.get(pk=job_id).status
            assert status in ("pending", "running"), f"the job ended with {count} members kept"
            return count or None

        wait_until(kept_while_running, timeout=60, what="members kept while the job runs")
        job = job_wait(job_id, timeout=120)
        assert job.status == "completed"
        wait_until(
            lambda: EvalJob.objects.get(pk=job_id).traces_zip_name, timeout=60,
            what="the worker to store the job's zip",
        )  # fmt: skip
    assert kept.count() == 100
