"""The job page while its job runs, in a real browser: the progress bar, the counts and the
figure cards change together, from one update; once the job is cancelled nothing on the page
says running."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from jobs import services
from jobs.events import EventType, job_event_append
from jobs.models import SeedRun, SeedStatus
from tests.frontend import job_rows
from tests.support.browser import orm_allowed, screenshot, sign_in

pytestmark = pytest.mark.browser

RUNNING = re.compile(r"\brunning\b", re.I)


def seeds_fail(job, seeds: list[int]) -> None:
    """Seeds end failed as a worker ends them, the job's event stream telling the page."""
    for run in SeedRun.objects.filter(job=job, seed__in=seeds):
        job_rows.seed_complete(seed_run=run, error="task app timed out")
        job_event_append(
            job_id=job.id,
            type=EventType.SEED_COMPLETED,
            data={"seed": run.seed, "seed_status": "failed"},
        )


def test_the_bar_and_the_cards_move_together_and_a_cancel_leaves_nothing_running(
    page, dashboard_user
):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=list(range(8)), name="live one")
        job_rows.job_start(job=job)
        job_rows.seed_complete(seed_run=SeedRun.objects.get(job=job, seed=0), score=1.0)
        SeedRun.objects.filter(job=job, seed__in=[6, 7]).update(status=SeedStatus.RUNNING)
    sign_in(page, path=f"/jobs/{job.id}/")
    bar = page.locator("[data-progress]")
    cards = page.locator("[data-live-figures]")
    expect(cards.locator("[data-figure='succeeded_failed']")).to_have_text("1 / 0")
    expect(page.locator("[data-count='running']")).to_have_text("2")
    page.evaluate("window.__sameDocument = true")

    with orm_allowed():
        seeds_fail(job, [1, 2, 3, 4, 5])
    expect(bar).to_contain_text("(5 failed)")
    # Read at once, no waiting: the cards came with the bar.
    assert cards.locator("[data-figure='succeeded_failed']").inner_text() == "1 / 5"
    assert cards.locator("[data-figure='mean_count']").inner_text() == (
        "over 6 samples, 5 failed counted 0"
    )
    assert cards.locator("[data-figure='mean_score']").inner_text() == "0.167"
    assert page.locator("[data-count='failed']").inner_text() == "5"
    assert page.evaluate("window.__sameDocument") is True

    # Cancelled from elsewhere (the API, the CLI): the open page follows.
    with orm_allowed():
        services.job_cancel(job=job)
    expect(page.locator("#job [data-status-badge]")).to_have_text("cancelled")
    expect(page.locator("[data-count='cancelled']")).to_have_text("2")
    expect(page.locator("table.seeds")).not_to_contain_text("running")
    assert not RUNNING.search(page.locator("main").inner_text())
    # What an ended job offers appears with it: the rerun, no cancel.
    expect(page.get_by_role("button", name="Rerun failed seeds")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "job-cancelled")


def test_after_cancelling_from_the_page_nothing_says_running(page, dashboard_user):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=[0, 1, 2])
        job_rows.job_start(job=job)
        SeedRun.objects.filter(job=job, seed__in=[0, 1]).update(status=SeedStatus.RUNNING)
    sign_in(page, path=f"/jobs/{job.id}/")
    expect(page.locator("[data-count='running']")).to_have_text("2")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#job [data-status-badge]")).to_have_text("cancelled")
    assert not RUNNING.search(page.locator("main").inner_text())
    expect(page.locator("[data-count='cancelled']")).to_have_text("3")
