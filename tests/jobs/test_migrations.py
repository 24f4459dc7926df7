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


def _unique_indexes(table: str) -> dict[str, int]:
    """PostgreSQL: the unique indexes of `table` by name, each with its file's number (a new
    number: the index was built again)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.relfilenode FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND i.indisunique",
            [table],
        )
        return dict(cursor.fetchall())


@pytest.mark.django_db(transaction=True)
def test_the_attempts_unique_columns_become_constraints_keeping_their_indexes():
    """Upgrading to unique constraints on the attempts' run id and token hash keeps the unique
    indexes PostgreSQL has (renamed: not read and sorted again under the table's lock), drops
    the LIKE ones, and still refuses a second attempt with the same run id or token."""
    from django.db import IntegrityError, connection, transaction
    from django.utils import timezone

    started = timezone.now()
    apps = migrate_to("jobs", "0020_replay")
    try:
        User = apps.get_model("auth", "User")
        job = apps.get_model("jobs", "EvalJob").objects.create(
            owner=User.objects.create(username="owner"), task_app_url="x"
        )
        seed_run = apps.get_model("jobs", "SeedRun").objects.create(job=job, seed=1)
        Attempt = apps.get_model("jobs", "RolloutAttempt")
        Attempt.objects.create(
            seed_run=seed_run, number=1, run_id="r1", token_hash="t1", started_at=started
        )
        table = Attempt._meta.db_table
        postgres = connection.vendor == "postgresql"
        before = _unique_indexes(table) if postgres else {}

        apps = migrate_to("jobs", "0021_fewer_indexes_written")
        Attempt = apps.get_model("jobs", "RolloutAttempt")
        with connection.cursor() as cursor:
            found = connection.introspection.get_constraints(cursor, table)
        assert found["attempt_unique_run_id"]["unique"]
        assert found["attempt_unique_token_hash"]["unique"]
        assert not [name for name in found if name.endswith("_like")]
        if postgres:
            after = _unique_indexes(table)
            assert sorted(after.values()) == sorted(before.values())  # the same files
            assert {"attempt_unique_run_id", "attempt_unique_token_hash"} <= set(after)
        for taken in ({"run_id": "r1", "token_hash": "t2"}, {"run_id": "r2", "token_hash": "t1"}):
            with pytest.raises(IntegrityError), transaction.atomic():
                Attempt.objects.create(
                    seed_run_id=seed_run.pk, number=2, started_at=started, **taken
                )
        assert list(Attempt.objects.values_list("run_id", flat=True)) == ["r1"]

        migrate_to("jobs", "0020_replay")  # and back: unique fields again
        with connection.cursor() as cursor:
            found = connection.introspection.get_constraints(cursor, table)
        assert "attempt_unique_run_id" not in found
        assert [c for c in found.values() if c["unique"] and c["columns"] == ["run_id"]]
    finally:
        migrate_latest()
