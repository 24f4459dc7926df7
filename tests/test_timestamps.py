"""`evalhub.timestamps.values_read`: a `values_list` query's rows as the ORM gives them, read on
PostgreSQL with psycopg's own timestamp loader (in C) rather than Django's Python one."""

from __future__ import annotations

import datetime
import uuid

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from evalhub.timestamps import values_read
from jobs.models import EvalJob, RolloutAttempt, SeedRun, SeedStatus
from traces.models import LLMCall
from traces.results.rows import model_rows
from traces.tokens import token_hash


def _rows_every_field_set():
    """A seed run, an attempt and an LLM call with their timestamps, numbers, text and JSON set
    (a timestamp's microseconds and a date far from now among them)."""
    owner = get_user_model().objects.create(username="stamps")
    job = EvalJob.objects.create(owner=owner, task_app_url="http://x")
    when = datetime.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=datetime.UTC)
    seed_run = SeedRun.objects.create(
        job=job, seed=7, status=SeedStatus.SUCCEEDED, score=0.5, metrics={"steps": 3},
        started_at=when, finished_at=timezone.now(), not_before=when - datetime.timedelta(days=400),
        lease_expires_at=when + datetime.timedelta(microseconds=1), error="e",
    )  # fmt: skip
    attempt = RolloutAttempt.objects.create(
        seed_run=seed_run, number=1, run_id=uuid.uuid4().hex, token_hash=token_hash("s"),
        started_at=when, finished_at=when,
    )  # fmt: skip
    LLMCall.objects.create(
        attempt=attempt, seq=1, started_at=when, total_tokens=12, cost_usd=0.25,
        request={"model": "m"}, response={"id": "r"},
    )  # fmt: skip
    return job


def test_the_rows_are_the_orms_whatever_the_field(db):
    job = _rows_every_field_set()
    for queryset in (
        SeedRun.objects.filter(job=job),
        RolloutAttempt.objects.filter(seed_run__job=job),
        LLMCall.objects.filter(attempt__seed_run__job=job),
    ):
        fields = queryset.model._meta.concrete_fields
        every = [f.attname for f in fields]  # JSON fields need Django's converter: as usual
        plain = [f.attname for f in fields if f.get_internal_type() != "JSONField"]
        for names in (every, plain):
            query = queryset.values_list(*names).order_by("id")
            assert values_read(query.all()) == list(query.all())
            assert values_read(query[1:2]) == list(query[1:2]) == []
            assert values_read(query.none()) == values_read(query.filter(pk__in=[])) == []


def test_the_result_rows_query_is_read_by_psycopgs_loader(db):
    """model_rows reads JSON fields as text: no value of its query needs a converter."""
    job = _rows_every_field_set()
    rows = list(model_rows(SeedRun.objects.filter(job=job), exclude=("task_trace",)))
    assert rows[0].metrics == {"steps": 3} and rows[0].started_at.tzinfo is datetime.UTC
    plain = [
        f.attname for f in SeedRun._meta.concrete_fields if f.get_internal_type() != "JSONField"
    ]
    compiler = SeedRun.objects.values_list(*plain).query.get_compiler(using="default")
    compiler.as_sql()
    converters = compiler.get_converters([c for c, *_ in compiler.select[: compiler.col_count]])
    assert converters == {} or connection.vendor != "postgresql"


def test_a_timestamp_is_read_in_utc_as_django_reads_it(db):
    job = _rows_every_field_set()
    query = SeedRun.objects.filter(job=job).values_list("started_at", "finished_at")
    ((started, finished),) = values_read(query)
    assert started == datetime.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=datetime.UTC)
    assert started.tzinfo is datetime.UTC and finished.tzinfo is datetime.UTC
    if connection.vendor == "postgresql":  # read by psycopg's loader, not Django's
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # the connection is open
        django_loader = connection.connection.adapters.get_loader(1184, 0)
        assert django_loader.__module__.startswith("django.")
