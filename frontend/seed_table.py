"""The job page's seed table, read a page at a time: the table's filter and order
(`triage.TableQuery`) are SQL over the job's seed runs (but an error class, matched in Python
over the ids and errors of the runs that have one), and only the rows of the page shown are
read with their usage. A 100,000-seed job's page costs a count and one page of rows, not a pass
over every row; the seed page's previous / next / next failure walk the same order.

Order: by the column asked for, then by seed (both reversed for a descending sort), a sample's
repeats in order; the rows missing the column's value last, in seed order, whichever the
direction."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import BigIntegerField, Case, F, Q, QuerySet, Value, When
from django.http import QueryDict

from frontend import triage
from jobs.models import EvalJob, SeedRun, SeedStatus
from traces.results import result_rows, totals

SORT_KEYS = ("seed", "status", "score", "latency_ms", "tokens", "cost_usd", "attempts")
PAGE_SIZES = (25, 100, 250, 1000)
PAGE_SIZE = 100


def page_size(params: QueryDict) -> int:
    """The `per_page` asked for, if it is one of PAGE_SIZES."""
    asked = params.get("per_page", "")
    return int(asked) if asked in {str(n) for n in PAGE_SIZES} else PAGE_SIZE


def seed_runs_shown(*, job: EvalJob, query: triage.TableQuery) -> QuerySet[SeedRun]:
    """The job's seed runs the table shows, in its order."""
    runs = SeedRun.objects.filter(job=job).defer("task_trace")
    if query.failures_only:
        runs = runs.filter(Q(status=SeedStatus.FAILED) | (Q(error__isnull=False) & ~Q(error="")))
    if query.min_score is not None:
        runs = runs.filter(score__gte=query.min_score)
    if query.max_score is not None:
        runs = runs.filter(score__lte=query.max_score)
    if query.error:
        # Only runs with an error can be of the class; which are is decided in Python (the
        # class blanks numbers: `triage.error_class`), by `table_page` and `seed_neighbours`.
        runs = runs.filter(error__isnull=False).exclude(error="")
    if query.q:
        runs = runs.filter(triage.seeds_matching(job=job, text=query.q))
    sort = query.sort if query.sort in SORT_KEYS else "seed"
    if sort in ("tokens", "cost_usd"):
        runs = runs.annotate(**{sort: totals.seed_run_usage_sql()[sort]})
    missing = Case(When(**{f"{sort}__isnull": True}, then=Value(1)), default=Value(0))
    seed_if_present = Case(
        When(**{f"{sort}__isnull": True}, then=Value(0)),
        default=F("seed"),
        output_field=BigIntegerField(),
    )
    direction = "desc" if query.descending else "asc"
    return runs.order_by(
        missing.asc(),
        getattr(F(sort), direction)(),
        getattr(seed_if_present, direction)(),
        "seed",
        "repeat",
    )


def table_page(*, job: EvalJob, params: QueryDict) -> tuple[Page, list[dict[str, Any]]]:
    """The page of the table that `params` ask for (`page`, `per_page`, the filter and order),
    and its result rows."""
    query = triage.TableQuery.from_query(params)
    runs = seed_runs_shown(job=job, query=query)
    if not query.error:
        page = Paginator(runs, page_size(params)).get_page(params.get("page"))
        return page, result_rows.seed_runs_rows(list(page.object_list))
    ids = [pk for pk, error in runs.values_list("pk", "error") if _of_class(error, query)]
    page = Paginator(ids, page_size(params)).get_page(params.get("page"))
    by_id = runs.in_bulk(list(page.object_list))
    return page, result_rows.seed_runs_rows([by_id[pk] for pk in page.object_list])


def _of_class(error: str | None, query: triage.TableQuery) -> bool:
    return not query.error or triage.error_class(error) == query.error


def seed_neighbours(*, job: EvalJob, seed: int, params: QueryDict) -> triage.Neighbours:
    """The seed page's neighbours in the table it came from. The plain table (every seed, in
    seed order) is read with three small queries; a filtered or sorted one reads the seed and
    status of each of its rows (no usage, no result rows)."""
    if any(params.get(key) for key in triage.TABLE_KEYS):
        query = triage.TableQuery.from_query(params)
        runs = seed_runs_shown(job=job, query=query).values_list("seed", "status", "error")
        shown = [{"seed": s, "status": st} for s, st, e in runs if _of_class(e, query)]
        return triage.neighbours(shown=shown, seed=seed)
    runs = SeedRun.objects.filter(job=job)
    after = runs.filter(seed__gt=seed).order_by("seed").values_list("seed", flat=True)
    return triage.Neighbours(
        previous=runs.filter(seed__lt=seed)
        .order_by("-seed")
        .values_list("seed", flat=True)
        .first(),
        next=after.first(),
        next_failure=after.filter(status=SeedStatus.FAILED).first(),
    )
