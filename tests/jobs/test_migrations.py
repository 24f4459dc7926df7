from __future__ import annotations

import pytest

from tests.support.migrations import migrate_latest, migrate_to


@pytest.mark.django_db(transaction=True)
def test_existing_jobs_get_their_samples_counted():
    apps = migrate_to("jobs", "0017_drop_runner_wait")
    try:
        User = apps.get_model("auth", "User")
        EvalJob = apps.get_model("jobs", "EvalJob")
        SeedRun = apps.get_model("jobs", "SeedRun")
        owner = User.objects.create(username="owner")
        repeated = EvalJob.objects.create(owner=owner, task_app_url="x", num_seeds=2, repeats=3)
        SeedRun.objects.bulk_create(
            SeedRun(job=repeated, seed=s, repeat=r) for s in (1, 2) for r in range(3)
        )
        # A re-judgement: one seed run per rollout judged again, `repeats` copied.
        judged = EvalJob.objects.create(
            owner=owner, task_app_url="x", num_seeds=2, repeats=3, judged_from=repeated
        )
        SeedRun.objects.bulk_create(SeedRun(job=judged, seed=1, repeat=r) for r in (0, 2))
        empty = EvalJob.objects.create(owner=owner, task_app_url="x")

        apps = migrate_to("jobs", "0018_job_num_samples")
        EvalJob = apps.get_model("jobs", "EvalJob")
        samples = dict(EvalJob.objects.values_list("id", "num_samples"))
        assert samples == {repeated.id: 6, judged.id: 2, empty.id: 0}
    finally:
        migrate_latest()
