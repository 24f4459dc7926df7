"""The jobs list sorted by its columns, through Django's test client: every order pages through
every job exactly once, jobs without the value last, and the filters and the sort are kept from
page to page."""

from __future__ import annotations

import html as htmllib
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import EvalJob, SeedRun
from tests.frontend import job_rows
from tests.frontend.test_views import alice, web  # noqa: F401  (fixtures)
from traces.models import LLMCall

NUM_JOBS = 28  # past one page of 25


@pytest.fixture
def jobs(alice):  # noqa: F811
    """Jobs with names (some none, one long), statuses, means and costs that differ."""
    made = []
    for i in range(NUM_JOBS):
        name = "" if i % 7 == 0 else f"job {chr(ord('a') + (i * 5) % 26)}{i:02d}"
        job = job_rows.job_make(owner=alice, seeds=[0], name=name)
        if i % 4 != 3:  # every fourth never ran: no mean, no cost
            job_rows.job_run_all(job=job, scores={0: (i * 7 % 10) / 10})
            LLMCall.objects.filter(attempt__seed_run__job=job).update(cost_usd=0.001 * (i % 5))
        if i == 5:
            LLMCall.objects.filter(attempt__seed_run__job=job).update(
                cost_usd=None, cost_unknown=True
            )
        EvalJob.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(hours=i))
        made.append(job.id)
    return made


def walk(web, query: str) -> list[str]:  # noqa: F811
    """The job ids of every page of the list, following its "next" links."""
    seen, url = [], f"/?{query}"
    while url:
        page = web.get(url).content.decode()
        seen += re.findall(r'<tr data-job-id="([^"]+)"', page)
        found = re.search(r'href="(\?[^"]*)" rel="next"', page)
        url = "/" + htmllib.unescape(found.group(1)) if found else None
    return seen


def test_every_order_pages_through_every_job_once(web, jobs):  # noqa: F811
    assert walk(web, "") == jobs  # newest first
    assert walk(web, "sort=created") == jobs[::-1]
    runs = {r.job_id: r for r in SeedRun.objects.filter(job_id__in=jobs)}
    names = dict(EvalJob.objects.filter(pk__in=jobs).values_list("id", "name"))
    costs = {j: [c.cost_usd for c in LLMCall.objects.filter(attempt__seed_run__job_id=j)]
             for j in jobs}  # fmt: skip

    def mean(j):
        run = runs[j]
        return None if run.status == "pending" else (run.score or 0.0)

    def cost(j):
        return None if None in costs[j] else sum(costs[j])

    for sort, key in (("mean", mean), ("cost", cost)):
        ascending = walk(web, f"sort={sort}")
        assert sorted(ascending) == sorted(jobs)  # each once
        values = [key(j) for j in ascending]
        present = [v for v in values if v is not None]
        assert present == sorted(present) and values[len(present) :] == [None] * (
            len(values) - len(present)
        )
        descending = walk(web, f"sort=-{sort}")
        values = [key(j) for j in descending]
        present = [v for v in values if v is not None]
        assert sorted(descending) == sorted(jobs)
        assert present == sorted(present, reverse=True)
        assert values[len(present) :] == [None] * (len(values) - len(present))
    by_name = walk(web, "sort=name")
    named = [names[j] for j in by_name if names[j]]
    assert named == sorted(named) and [names[j] for j in by_name[len(named) :]] == [""] * (
        NUM_JOBS - len(named)
    )
    assert walk(web, "sort=nonsense") == jobs


def test_the_sort_is_kept_with_the_filters_and_the_headers_flip_it(web, jobs):  # noqa: F811
    page = web.get("/?sort=-mean&status=completed").content.decode()
    mean_head = re.search(r'<th class="num" aria-sort="(\w+)"><a href="([^"]+)" data-sort="mean"',
                          page)  # fmt: skip
    assert mean_head.group(1) == "descending"
    assert "sort=mean" in htmllib.unescape(mean_head.group(2))  # the next click: ascending
    assert "status=completed" in htmllib.unescape(mean_head.group(2))
    assert '<input type="hidden" name="sort" value="-mean">' in page  # the search keeps it
    completed = walk(web, "sort=-mean&status=completed")
    assert len(completed) == len([i for i in range(NUM_JOBS) if i % 4 != 3])
