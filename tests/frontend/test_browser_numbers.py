"""The dashboard's numbers in a real browser: pick two jobs and compare them down to one seed of
each, and rerun a job's failed seeds from its page (a real job, a real worker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import EvalJob, SeedRun
from tests.frontend import job_rows
from tests.frontend.test_browser import JOB_TIMEOUT_MS, job_post, worker_start
from tests.support.browser import orm_allowed, screenshot, sign_in
from tests.support.servers import serve_asgi
from tests.support.task_app import task_app_create

pytestmark = pytest.mark.browser


def test_pick_two_jobs_compare_and_follow_a_regression_to_both_seed_pages(page, dashboard_user):
    with orm_allowed():
        base = job_rows.job_make(owner=dashboard_user, seeds=[0, 1, 2], name="baseline")
        job_rows.job_run_all(job=base, scores={0: 1.0, 1: 1.0, 2: 0.0})
        candidate = job_rows.job_make(owner=dashboard_user, seeds=[0, 1, 2], name="candidate")
        job_rows.job_run_all(job=candidate, scores={0: 1.0, 1: 0.0, 2: 1.0})
        EvalJob.objects.filter(pk=base.pk).update(created_at=timezone.now() - timedelta(hours=1))
        job_rows.job_make(owner=dashboard_user, seeds=[5], name="unrelated")

    sign_in(page)
    page.get_by_label("Pick baseline to compare").check()
    page.get_by_label("Pick candidate to compare").check()
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(
        f"{page.url.split('/compare/')[0]}/compare/?base={base.id}&candidate={candidate.id}"
    )
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    rows = page.locator("table.compare tbody tr")
    expect(rows).to_have_count(3)
    # The regression first, then the improvement.
    expect(rows.nth(0)).to_have_attribute("data-seed", "1")
    expect(rows.nth(0)).to_contain_text("pass → fail")
    expect(rows.nth(1)).to_contain_text("fail → pass")
    expect(page.locator("[data-figure='wins']")).to_contain_text("1 / 1 / 1")
    expect(page.locator("[data-figure='p_value']")).to_contain_text("sign-flip")

    page.locator("[data-sort-delta]").click()  # ascending: the regression's −1 first
    expect(rows.nth(0)).to_have_attribute("data-seed", "1")
    page.locator("[data-sort-delta]").click()  # descending: the improvement's +1 first
    expect(rows.nth(0)).to_have_attribute("data-seed", "2")
    screenshot(page, "compare")

    page.locator("tr[data-seed='1'] a").click()
    expect(page.get_by_role("heading", name="Seed 1, side by side")).to_be_visible()
    base_side, candidate_side = (
        page.locator("[data-side='base']"),
        page.locator("[data-side='candidate']"),
    )
    expect(base_side).to_contain_text("baseline")
    expect(base_side).to_contain_text("1.000")
    expect(candidate_side).to_contain_text("0.000")
    expect(candidate_side.locator(".msg-assistant").first).to_be_visible()

    candidate_side.locator("[data-seed-page]").click()
    expect(page.get_by_role("heading", name="Seed 1")).to_be_visible()
    expect(page).to_have_url(f"{page.url.split('/jobs/')[0]}/jobs/{candidate.id}/seeds/1/")
    page.go_back()
    base_side.locator("[data-seed-page]").click()
    expect(page).to_have_url(f"{page.url.split('/jobs/')[0]}/jobs/{base.id}/seeds/1/")


def test_rerun_the_failed_seeds_from_the_job_page(page, web_server, worker_factory):
    app, state = task_app_create()
    env_config = {"call_llm": "tools", "status_first": {"1": 1}}
    with serve_asgi(app) as task_app_url:
        worker_start(worker_factory, web_server)
        job_id = job_post(
            web_server, task_app_url=task_app_url, seeds=[0, 1, 2], env_config=env_config,
            name="weather nightly",
        )  # fmt: skip
        sign_in(page, path=f"/jobs/{job_id}/")
        expect(page.get_by_role("heading", name="weather nightly")).to_be_visible()
        expect(page.locator("#job [data-status-badge]")).to_have_text(
            "completed", timeout=JOB_TIMEOUT_MS
        )
        page.reload()
        expect(page.locator("[data-count='failed']")).to_have_text("1")
        expect(page.locator("[data-mean-count]")).to_contain_text("over 3 samples, 1 failed")
        expect(page.locator("[data-figure='pass@1']")).to_be_visible()
        expect(page.locator("#fn-passk")).to_contain_text("C(n−c, k)")
        before = len(state.requests)

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Rerun failed seeds").click()
        expect(page.locator("[data-parent]")).to_contain_text(job_id)
        expect(page.get_by_role("heading", name="weather nightly (rerun)")).to_be_visible()
        expect(page.locator("#job [data-status-badge]")).to_have_text(
            "completed", timeout=JOB_TIMEOUT_MS
        )
        rerun_seeds = [r["env"]["seed"] for r in state.requests[before:]]
    assert rerun_seeds == [1]
    expect(page.locator("[data-count='succeeded']")).to_have_text("3")
    expect(page.get_by_role("button", name="Rerun failed seeds")).to_have_count(0)
    with orm_allowed():
        child = EvalJob.objects.get(parent_job_id=job_id)
        reused = SeedRun.objects.filter(job=child, reused_from__isnull=False)
        assert sorted(reused.values_list("seed", flat=True)) == [0, 2]
    screenshot(page, "job-rerun")
