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


@pytest.mark.django_db
def test_the_rows_written_as_rollouts_run_carry_no_index_another_one_covers():
    """Every index of a row written as a rollout runs (its seed run, its attempt, its event,
    its LLM calls) is written again for each rollout: none may hold only the first columns of
    another (a foreign key's own, PostgreSQL's second index of a unique text column)."""
    from django.db import connection

    from jobs.models import JobEvent, RolloutAttempt, SeedRun
    from traces.models import LLMCall

    covered = []
    with connection.cursor() as cursor:
        for model in (SeedRun, RolloutAttempt, JobEvent, LLMCall):
            table = model._meta.db_table
            found = connection.introspection.get_constraints(cursor, table)
            indexes = {
                name: tuple(c["columns"])
                for name, c in found.items()
                if (c["index"] or c["unique"]) and c["columns"]
            }
            covered += [
                (table, name, columns)
                for name, columns in indexes.items()
                for other, longer in indexes.items()
                if other != name and longer[: len(columns)] == columns
            ]
            assert indexes, table  # each has a constraint or an index, read
    assert covered == []
