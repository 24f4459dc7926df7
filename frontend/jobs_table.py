"""The jobs list's order: by when a job was made (newest first unless asked), its name, status,
mean score or cost, in SQL, so the list's pages (`?page=`) cut one stable order. The mean and
the cost are those the list shows (`jobs.selectors.job_mean_score_sql`,
`traces.results.totals.job_cost_sql`); a job without one (nothing finished, an unknown price,
no name) sorts last whichever the direction; ties go newest first."""

from __future__ import annotations

from django.db.models import Case, F, IntegerField, QuerySet, Value, When
from django.db.models.functions import Lower
from django.http import QueryDict

from jobs.models import EvalJob
from jobs.selectors import job_mean_score_sql
from traces.results.totals import job_cost_sql

# The query string's `sort` key -> the column ordered by.
SORTS = {"created": "created_at", "name": "name_key", "status": "status",
         "mean": "mean_key", "cost": "cost_key"}  # fmt: skip


def order_asked(params: QueryDict) -> tuple[str, bool]:
    """(sort key, descending) of `?sort=name` (ascending) or `?sort=-name` (descending); none,
    or an unknown key: newest first."""
    asked = params.get("sort", "")
    if asked.lstrip("-") not in SORTS:
        return "created", True
    return asked.lstrip("-"), asked.startswith("-")


def jobs_ordered(jobs: QuerySet[EvalJob], sort: str, descending: bool) -> QuerySet[EvalJob]:
    if sort == "name":
        jobs = jobs.annotate(name_key=Lower("name"))
    elif sort == "mean":
        jobs = jobs.annotate(mean_key=job_mean_score_sql())
    elif sort == "cost":
        jobs = jobs.annotate(cost_key=job_cost_sql())
    column = SORTS[sort]
    missing = (
        When(**{column: ""}, then=Value(1))
        if sort == "name"
        else When(**{f"{column}__isnull": True}, then=Value(1))
    )
    last = Case(missing, default=Value(0), output_field=IntegerField())
    direction = "desc" if descending else "asc"
    return jobs.order_by(last.asc(), getattr(F(column), direction)(), "-created_at", "-id")
