"""`Among`: a filter on a column being one of many values, one array parameter on
PostgreSQL whatever their number."""

from __future__ import annotations

import pytest
from django.db import connection

from jobs.among import Among
from jobs.models import RolloutAttempt, SeedRun
from tests.jobs.conftest import claim

pytestmark = pytest.mark.django_db


def test_the_rows_among_many_values_are_those_of_an_in_list(job):
    ids = list(SeedRun.objects.filter(job=job).values_list("id", flat=True))
    wanted = ids[::2] + list(range(10**6, 10**6 + 1500))  # most of them match nothing
    among = SeedRun.objects.filter(Among("id", wanted))
    assert sorted(among.values_list("id", flat=True)) == ids[::2]
    assert set(among) == set(SeedRun.objects.filter(id__in=wanted))
    assert not SeedRun.objects.filter(Among("id", [])).exists()


def test_a_path_through_a_relation_is_followed(job):
    held = claim(job, "w1", limit=3)
    attempts = RolloutAttempt.objects.filter(Among("seed_run__seed", [s.seed for s in held[:2]]))
    assert sorted(a.seed_run_id for a in attempts) == [s.id for s in held[:2]]


def test_on_postgresql_the_values_are_one_parameter(job):
    """psycopg converts a statement of more than 50 parameters anew on every execution."""
    sql, params = SeedRun.objects.filter(Among("id", range(5000))).query.sql_with_params()
    if connection.vendor == "postgresql":
        assert len(params) == 1 and "= ANY(" in sql
    else:
        assert len(params) == 5000 and " IN (" in sql
