"""The seed table of a bigger job in a real browser: a page size chosen from the form, the sort
and the filter kept from page to page, and the seed page walking the same order."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from jobs.models import SeedRun
from tests.frontend import job_rows
from tests.support.browser import orm_allowed, sign_in

pytestmark = pytest.mark.browser


def test_the_seed_table_pages_keep_the_sort_and_filter_and_seed_pages_follow(page, dashboard_user):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=list(range(60)))
        job_rows.job_start(job=job)
        for run in SeedRun.objects.filter(job=job).order_by("seed"):
            error = "task app answered HTTP 500: crashed" if run.seed % 4 == 3 else None
            job_rows.seed_complete(seed_run=run, score=run.seed / 100, error=error)
        job_rows.job_finish(job=job)

    sign_in(page, path=f"/jobs/{job.id}/")
    rows = page.locator("table.seeds:not(.per-seed) tbody tr")
    expect(rows).to_have_count(60)  # one page of the default 100
    expect(page.locator("nav.pager")).to_have_count(0)

    page.locator("select[name='per_page']").select_option("25")
    expect(rows).to_have_count(25)
    expect(page.locator("[data-page-number]")).to_have_text("Page 1 of 3")
    page.locator("table.seeds th a", has_text="Score").click()  # ascending: the failures last
    expect(page).to_have_url(re.compile(r"sort=score"))
    expect(rows.first).to_have_attribute("data-seed", "0")
    page.locator("a[rel='next']").click()
    expect(page.locator("[data-page-number]")).to_have_text("Page 2 of 3")
    expect(page).to_have_url(re.compile(r"per_page=25"))
    expect(page).to_have_url(re.compile(r"sort=score"))
    # Scored seeds 0-59 but every fourth: 45 of them, page 2 is the 26th to the 45th.
    expect(rows.first).to_have_attribute("data-seed", "33")
    expect(rows.nth(20)).to_have_attribute("data-seed", "3")  # the first failure: no score
    page.locator("a[rel='last']").click()
    expect(page.locator("[data-page-number]")).to_have_text("Page 3 of 3")
    expect(rows).to_have_count(10)

    # Failures only, from the form: 15 seeds on one page, the sort kept.
    page.locator("input[name='failures']").check()
    expect(page.locator("[data-seed-count]")).to_contain_text("15 matching, of 60")
    expect(page).to_have_url(re.compile(r"sort=score"))
    expect(page.locator("nav.pager")).to_have_count(0)

    # A seed of page 2 of the scored order: its neighbours are in that order.
    page.goto(f"/jobs/{job.id}/?sort=-score&per_page=25&page=2")
    rows.first.locator("a").click()
    expect(page.get_by_role("heading", name="Seed 25")).to_be_visible()
    page.locator("a[rel='next']").click()
    expect(page.get_by_role("heading", name="Seed 24")).to_be_visible()
    page.locator("a[rel='prev']").click()
    page.locator("a[rel='prev']").click()
    expect(page.get_by_role("heading", name="Seed 26")).to_be_visible()
