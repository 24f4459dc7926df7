"""The first minutes in a real browser: signing in with an account made by the command, the
API docs with no network, and the jobs list's figures moving live over the event stream."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from jobs.models import SeedRun
from tests.frontend import job_rows
from tests.frontend.test_browser import JOB_TIMEOUT_MS, job_post, worker_start
from tests.support.browser import DESKTOP, PHONE, orm_allowed, screenshot, sign_in
from tests.support.servers import serve_asgi
from tests.support.task_app import task_app_create

pytestmark = pytest.mark.browser


def test_sign_in_with_the_password_createuser_printed_shows_that_users_jobs(
    page, web_server, dashboard_user
):
    with orm_allowed():
        out = io.StringIO()
        call_command("createuser", "newcomer", stdout=out)
        password = out.getvalue().strip().splitlines()[-1]
        user = type(dashboard_user).objects.get(username="newcomer")
        mine = job_rows.job_make(owner=user, seeds=[0, 1])
        theirs = job_rows.job_make(owner=dashboard_user, seeds=[0])

    page.goto("/")
    expect(page.locator("#how-accounts")).to_contain_text("manage.py createuser NAME")
    screenshot(page, "sign-in")
    sign_in(page, username="newcomer", password=password)
    expect(page.locator("header .who")).to_have_text("newcomer")
    expect(page.locator(f"tr[data-job-id='{mine.id}']")).to_be_visible()
    expect(page.locator(f"tr[data-job-id='{theirs.id}']")).to_have_count(0)
    # A job that has not started has spent nothing yet: a dash, not 0 and $0.
    row = page.locator(f"tr[data-job-id='{mine.id}']")
    expect(row.locator("[data-figure='tokens']")).to_have_text("—")
    expect(row.locator("[data-figure='cost']")).to_have_text("—")


@pytest.mark.parametrize("path", ["/api/docs", "/api/docs/"])
def test_api_docs_render_with_no_network(page, web_server, path):
    outside: list[str] = []

    def only_ours(route):
        if route.request.url.startswith(web_server):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_ours)
    page.goto(path)
    expect(page.get_by_role("heading", name="evalhub API").first).to_be_visible()
    expect(page.get_by_text("/api/eval/jobs").first).to_be_attached()
    assert outside == []


def test_jobs_list_figures_change_live_over_the_event_stream(page, web_server, worker_factory):
    app, _ = task_app_create()
    env_config = {"call_llm": "tools", "delay_s": 0.6, "status_always": {"2": 400}}
    with serve_asgi(app) as task_app_url:
        job_id = job_post(
            web_server, task_app_url=task_app_url, seeds=[0, 1, 2, 3], env_config=env_config
        )
        sign_in(page)
        row = page.locator(f"tr[data-job-id='{job_id}']")
        expect(row.locator("[data-figure='mean_score']")).to_have_text("—")
        expect(row.locator("[data-figure='tokens']")).to_have_text("—")
        expect(page.locator("body")).to_have_attribute("data-live", "sse")
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads

        worker_start(worker_factory, web_server)
        expect(row.locator("[data-status-badge]")).to_have_text("completed", timeout=JOB_TIMEOUT_MS)
    # The last figures, as the server computes them, without a reload.
    expect(row.locator("[data-figure='mean_score']")).to_have_text(
        "0.120"
    )  # seeds 0, 1, 3: 0, .37, .11, and the failed seed 2 counting 0
    expect(row.locator("[data-figure='tokens']")).not_to_have_text("—")
    expect(row.locator("[data-figure='cost']")).to_contain_text("$")
    expect(row).to_contain_text("(1 failed)")
    assert page.evaluate("window.__sameDocument") is True
    assert page.locator("body").get_attribute("data-live") == "sse"


def test_failure_groups_filter_the_table_and_next_failure_keeps_the_filter(page, dashboard_user):
    errors = {1: "task app answered HTTP 500: crashed", 4: "task app answered HTTP 500: again"}
    errors[6] = "invalid RolloutResponse: body is not JSON: <html>"
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=list(range(8)))
        job_rows.job_start(job=job)
        for run in SeedRun.objects.filter(job=job).order_by("seed"):
            job_rows.seed_complete(seed_run=run, score=0.5, error=errors.get(run.seed))
        job_rows.job_finish(job=job)

    sign_in(page, path=f"/jobs/{job.id}/")
    groups = page.locator(".failure-groups a[data-error-class]")
    expect(groups).to_have_count(2)
    expect(groups.first).to_contain_text("2 task app answered HTTP 500")
    groups.first.click()
    rows = page.locator("table.seeds tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-seed", "1")
    expect(page.locator("[data-seed-count]")).to_contain_text("2 matching, of 8")
    screenshot(page, "job-failures")
    page.set_viewport_size(PHONE)  # the error stays on a phone, whole, within the screen
    error = rows.first.locator("td.err")
    expect(error).to_contain_text("task app answered HTTP 500: crashed")
    box = error.bounding_box()
    assert box["width"] > 0 and box["x"] + box["width"] <= PHONE["width"]
    page.set_viewport_size(DESKTOP)

    rows.first.locator("a").click()
    expect(page.get_by_role("heading", name="Seed 1")).to_be_visible()
    page.locator("[data-next-failure]").click()
    expect(page.get_by_role("heading", name="Seed 4")).to_be_visible()
    # Seed 6 failed too, but not with this error: the filter came along, so 4 is the last.
    expect(page.locator("[data-next-failure]")).to_have_count(0)
    expect(page.locator("a[rel='next']")).to_have_count(0)
    page.locator("a[rel='prev']").click()
    expect(page.get_by_role("heading", name="Seed 1")).to_be_visible()


def test_the_raw_exchange_of_a_call_unfolds_and_copies(page, dashboard_user):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=[3])
        job_rows.job_run_all(job=job)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(page, path=f"/jobs/{job.id}/seeds/3/")
    raw = page.locator("details.raw-exchange").first
    request = raw.locator("pre.json").first
    expect(request).to_be_hidden()
    raw.locator("summary").click()
    expect(request).to_be_visible()
    assert json.loads(request.inner_text())["tools"][0]["function"]["name"] == "multiply"
    screenshot(page, "seed-raw-exchange")
    raw.get_by_role("button", name="Copy").first.click()
    expect(raw.get_by_role("button", name="Copied")).to_have_count(1)
    copied = page.evaluate("navigator.clipboard.readText()")
    assert json.loads(copied)["messages"][0]["content"] == job_rows.SYSTEM


def test_search_over_the_seeds_finds_error_text_and_message_content(page, dashboard_user):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=list(range(6)))
        job_rows.job_start(job=job)
        for run in SeedRun.objects.filter(job=job).order_by("seed"):
            error = (
                "task app answered HTTP 422: no weather station in Atlantis"
                if run.seed == 4
                else None
            )
            job_rows.seed_complete(seed_run=run, score=0.5, error=error)
        job_rows.job_finish(job=job)
    sign_in(page, path=f"/jobs/{job.id}/")
    rows = page.locator("table.seeds tbody tr")
    expect(rows).to_have_count(6)
    search = page.get_by_label("Search the seeds")
    search.fill("atlantis")
    search.press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-seed", "4")
    search.fill("Seed 2: what is")  # the user message of seed 2's conversation
    search.press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-seed", "2")
    rows.first.locator("a").click()  # the search is carried to the seed page
    expect(page.get_by_role("link", name="Table (1 of 1)")).to_be_visible()
