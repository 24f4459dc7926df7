"""Rows written in bulk as the ORM would write them: `rows_insert`, `rows_update`,
`values_prepare`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import bulk_values
from jobs.bulk import rows_insert, rows_update
from jobs.bulk_values import values_prepare
from jobs.models import AttemptStatus, JobEvent, RolloutAttempt, SeedRun, SeedStatus
from tests.jobs.conftest import claim
from traces.models import TraceMember

pytestmark = pytest.mark.django_db


def test_values_are_prepared_as_their_fields_prepare_them(job):
    """A value passed on as it is must be what the field would have made of it; the others
    (a datetime, a JSON value, a choice) go through their field."""
    fields = tuple(SeedRun._meta.concrete_fields)
    samples = {
        "CharField": ["w1", "", SeedStatus.RUNNING, None],
        "TextField": ["an error", None],
        "FloatField": [0.25, 1.0, None],
        "IntegerField": [3, 0, None],
        "PositiveIntegerField": [2, None],
        "BigIntegerField": [2**40, None],
        "DateTimeField": [datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), None],
        "AutoField": [5, None],
        "BigAutoField": [5, None],
    }
    for field in fields:
        target = field.target_field if field.is_relation else field  # a foreign key's
        for value in samples.get(target.get_internal_type(), []):  # JSON: below
            [prepared] = values_prepare((field,), [value])
            assert prepared == field.get_db_prep_save(value, connection), (field.name, value)
    # A JSON value is adapted for the driver, never passed on as a dict.
    metrics = SeedRun._meta.get_field("metrics")
    [prepared] = values_prepare((metrics,), [{"a": 1}])
    assert not isinstance(prepared, dict)


def test_rows_inserted_take_their_defaults_and_their_ids_come_back_in_order(job):
    held = claim(job, "w1", limit=3)
    now = datetime.now(UTC)
    columns = ("seed_run", "worker", "number", "run_id", "token_hash", "status", "started_at")
    rows = [
        (seed_run.pk, "w1", 2, f"run-{n}", f"{n}" * 64, AttemptStatus.RUNNING, now)
        for n, seed_run in enumerate(held)
    ]
    ids = rows_insert(RolloutAttempt, columns, rows)
    attempts = [RolloutAttempt.objects.get(pk=i) for i in ids]
    assert [a.run_id for a in attempts] == ["run-0", "run-1", "run-2"]
    assert [a.seed_run_id for a in attempts] == [sr.pk for sr in held]
    for attempt in attempts:
        assert attempt.status == "running" and attempt.started_at == now
        # The database default, and the NULLs of what was not given.
        assert attempt.llm_calls_admitted == 0
        assert attempt.http_status is None and attempt.error is None
        assert attempt.finished_at is None and attempt.latency_ms is None
    assert rows_insert(RolloutAttempt, columns, []) == []


def test_json_values_inserted_read_back_as_written(job):
    data = [{"n": 1, "text": 'quoted "words", back\\slash and ünïcode'}, {"list": [1, None]}, {}]
    rows = [(job.id, 100 + n, "test.event", d, datetime.now(UTC)) for n, d in enumerate(data)]
    ids = rows_insert(JobEvent, ("job_id", "seq", "type", "data", "created_at"), rows)
    assert [JobEvent.objects.get(pk=i).data for i in ids] == data


def test_json_values_orjson_refuses_are_written_by_their_field_and_nan_is_null(job):
    """JSON values are encoded by orjson; what it refuses (a key that is not a string, an
    integer beyond 64 bits) goes through the field as before, and a NaN, which JSON has not,
    is null (the field wrote `NaN`, which PostgreSQL refuses)."""
    data = [{1: "a key that is a number"}, {"big": [2**70]}, {"nan": [float("nan"), 1.5]}]
    rows = [(job.id, 300 + n, "test.event", d, datetime.now(UTC)) for n, d in enumerate(data)]
    ids = rows_insert(JobEvent, ("job_id", "seq", "type", "data", "created_at"), rows)
    assert [JobEvent.objects.get(pk=i).data for i in ids] == [
        {"1": "a key that is a number"}, {"big": [2**70]}, {"nan": [None, 1.5]}
    ]  # fmt: skip
    # An update, through the same preparation.
    rows_update(JobEvent, [({"id": ids[0]}, {"data": {"list": [{2: 3}]}})])
    assert JobEvent.objects.get(pk=ids[0]).data == {"list": [{"2": 3}]}


def test_rows_inserted_with_update_on_replace_the_rows_they_meet(job):
    """As bulk_create(update_conflicts=True): a row whose unique value is taken updates the
    row there (its other columns), a new one is inserted; ids come back in order."""
    first, second = claim(job, "w1", limit=2)
    columns = ("seed_run", "key", "crc", "size", "num_llm_calls", "data")
    rows_insert(
        TraceMember, columns, [(first.pk, "old", 1, 2, 0, b"\x00old")], update_on="seed_run"
    )
    ids = rows_insert(
        TraceMember, columns,
        [(first.pk, "new", 3, 4, 5, b"\x01new\xff"), (second.pk, "b", 6, 7, 8, b"")],
        update_on="seed_run",
    )  # fmt: skip
    assert ids == [first.pk, second.pk]
    kept = {m.seed_run_id: m for m in TraceMember.objects.all()}
    assert (kept[first.pk].key, kept[first.pk].crc, kept[first.pk].num_llm_calls) == ("new", 3, 5)
    assert bytes(kept[first.pk].data) == b"\x01new\xff" and bytes(kept[second.pk].data) == b""
    assert not kept[first.pk].exported  # not given: left as it was


def test_rows_updated_as_the_orm_updates_them(job):
    """`rows_update` writes each row's values where its conditions hold, and only there; a
    value without an exact JSON form (NaN) is written all the same (on PostgreSQL such rows
    go as arrays, not as a JSON document)."""
    held = claim(job, "w1", limit=3)
    now = datetime.now(UTC)
    metrics = {"text": 'a "quote", \\ and ünïcode', "n": [1, None]}

    def row(seed_run, owner, score, metrics=None):
        return (
            {"id": seed_run.pk, "status": SeedStatus.RUNNING, "lease_owner": owner},
            {"status": SeedStatus.SUCCEEDED, "score": score, "finished_at": now, "error": None,
             "metrics": metrics},
        )  # fmt: skip

    rows_update(SeedRun, [row(held[0], "w1", 0.5, metrics), row(held[1], "w1", None)])
    rows_update(SeedRun, [row(held[2], "w2", 1.0, metrics)])  # held by w1, not w2
    got = {sr.pk: sr for sr in SeedRun.objects.filter(pk__in=[sr.pk for sr in held])}
    first, none, other = (got[sr.pk] for sr in held)
    assert (first.status, first.score, first.finished_at, first.metrics) == (
        "succeeded", 0.5, now, metrics
    )  # fmt: skip
    assert (none.status, none.score, none.metrics) == ("succeeded", None, None)
    assert other.status == "running" and other.score is None
    rows_update(SeedRun, [row(held[2], "w1", float("nan"))])
    nan = SeedRun.objects.get(pk=held[2].pk)
    assert nan.status == "succeeded"
    if connection.vendor == "postgresql":  # SQLite has no NaN: it keeps NULL
        assert nan.score != nan.score


def test_rows_updated_return_what_was_written_and_only_that(job):
    """With `returning`, `rows_update` gives the rows its conditions met (their fields after
    the update), what a locking read before it would have found: never a row held by another
    worker."""
    held = claim(job, "w1", limit=3)
    SeedRun.objects.filter(pk=held[1].pk).update(lease_owner="w2")
    rows = [
        ({"id": sr.pk, "status": SeedStatus.RUNNING, "lease_owner": "w1"},
         {"status": SeedStatus.FAILED, "error": f"e{n}", "lease_owner": ""})
        for n, sr in enumerate(held)
    ]  # fmt: skip
    got = rows_update(SeedRun, rows, returning=("id", "seed", "status", "lease_owner"))
    assert sorted(got) == sorted(
        (sr.pk, sr.seed, "failed", "") for sr in (held[0], held[2])
    )  # fmt: skip
    assert SeedRun.objects.get(pk=held[1].pk).status == "running"
    assert rows_update(SeedRun, rows, returning=("id",)) == []  # held by nobody now


def test_rows_updated_beyond_a_statements_size_go_in_several_and_all_land(job, monkeypatch):
    """On PostgreSQL `rows_update` sends rows in JSON documents of about
    `jobs.bulk_values.STATEMENT_BYTES` (a bigger row alone: its copies in the statement must not
    grow with the batch), the row without an exact JSON form as arrays between them; every
    row is written all the same."""
    monkeypatch.setattr(bulk_values, "STATEMENT_BYTES", 300)
    held = claim(job, "w1", limit=3)
    big = {"text": "x" * 400}
    scores = [0.25, float("nan"), 0.75]
    rows = [
        ({"id": sr.pk, "status": SeedStatus.RUNNING, "lease_owner": "w1"},
         {"status": SeedStatus.SUCCEEDED, "score": score, "metrics": big})
        for sr, score in zip(held, scores, strict=True)
    ]  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        rows_update(SeedRun, rows)
    got = {sr.pk: sr for sr in SeedRun.objects.filter(pk__in=[sr.pk for sr in held])}
    assert [got[sr.pk].status for sr in held] == ["succeeded"] * 3
    assert [got[sr.pk].metrics for sr in held] == [big] * 3
    assert (got[held[0].pk].score, got[held[2].pk].score) == (0.25, 0.75)
    if connection.vendor == "postgresql":
        updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
        assert len(updates) == 3  # one a row: each is bigger than a statement's document
        assert "jsonb_array_elements" in updates[0] and "UNNEST" in updates[1]


def test_rows_inserted_whatever_their_values(job):
    """Values without an exact JSON form, and bytes, are inserted as they were given."""
    rows = [(job.id, 200, "test.event", {"big": 2**70}, datetime.now(UTC))]
    [i] = rows_insert(JobEvent, ("job_id", "seq", "type", "data", "created_at"), rows)
    assert JobEvent.objects.get(pk=i).data == {"big": 2**70}
    [sr] = claim(job, "w1", limit=1)
    columns = ("seed_run", "key", "crc", "size", "num_llm_calls", "data")
    rows_insert(TraceMember, columns, [(sr.pk, "k", 2**40, 1, 0, bytes(range(256)))])
    assert bytes(TraceMember.objects.get(seed_run=sr).data) == bytes(range(256))
