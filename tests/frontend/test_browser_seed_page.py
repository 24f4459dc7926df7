"""The seed page in a real browser: the sample's time line (calls and tools on one axis,
readable at a phone's width) and the keyboard shortcuts between seeds."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from jobs.models import RolloutAttempt, SeedRun
from tests.frontend import job_rows
from tests.support.browser import PHONE, SCREENSHOTS, orm_allowed, press, screenshot, sign_in
from traces.models import LLMCall

pytestmark = pytest.mark.browser

TOOLS = [
    {"step": 1, "call_id": "call_0", "name": "multiply", "arguments": {"a": 17, "b": 23},
     "result": "391", "error": None, "duration_ms": 350.0, "reward": None, "done": False},
]  # fmt: skip


def test_the_seed_page_draws_the_calls_and_tools_on_a_time_line(page, dashboard_user):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=[0])
        run = job_rows.seed_complete(seed_run=SeedRun.objects.get(job=job))
        attempt = RolloutAttempt.objects.get(seed_run=run)
        start = attempt.started_at
        for seq, offset in ((1, 0), (2, 900)):
            LLMCall.objects.filter(attempt=attempt, seq=seq).update(
                started_at=start + timedelta(milliseconds=offset), latency_ms=450.0
            )
        RolloutAttempt.objects.filter(pk=attempt.pk).update(
            finished_at=start + timedelta(milliseconds=1600)
        )
        SeedRun.objects.filter(pk=run.pk).update(
            task_trace={"kind": "mcp_gym", "tool_executions": TOOLS}
        )

    sign_in(page, path=f"/jobs/{job.id}/seeds/0/")
    line = page.locator("[data-timeline='1']")
    expect(line).to_be_visible()
    expect(line.locator("[data-lane='model'] [data-span]")).to_have_count(2)
    expect(line.locator("[data-lane='tools'] [data-span]")).to_have_count(1)
    expect(line.locator("[data-timeline-split]")).to_have_text(
        "LLM calls 900 ms · tools 350 ms · elsewhere 350 ms (task app, network) · 1.60 s in all"
    )
    # Where each is drawn: call 1 from 0, the tool after it (450 ms), call 2 at 900 ms.
    lane_box = line.locator("[data-lane='model']").bounding_box()
    call_2 = line.locator("[data-lane='model'] [data-span]").nth(1).locator("rect").first
    call_2 = call_2.bounding_box()
    tool = line.locator("[data-lane='tools'] [data-span] rect").first.bounding_box()
    assert call_2["x"] - lane_box["x"] == pytest.approx(lane_box["width"] * 900 / 1600, abs=2)
    assert tool["x"] - lane_box["x"] == pytest.approx(lane_box["width"] * 450 / 1600, abs=2)
    assert tool["width"] == pytest.approx(lane_box["width"] * 350 / 1600, abs=2)
    expect(line.locator("title").first).to_have_text(
        "call 1 · gpt-4o-mini-2024-07-18 · 450 ms (first token 181 ms)"
    )
    screenshot(page, "seed-timeline")
    line.screenshot(path=str(SCREENSHOTS / "seed-timeline-detail.png"))

    # A phone: the time line fits the screen and its labels keep their size.
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    lane_box = line.locator("[data-lane='model']").bounding_box()
    assert lane_box["x"] + lane_box["width"] <= PHONE["width"]
    assert lane_box["width"] > 200
    size = line.locator(".tl-axis span").first.evaluate("e => getComputedStyle(e).fontSize")
    assert float(size.rstrip("px")) >= 10
    line.screenshot(path=str(SCREENSHOTS / "seed-timeline-detail-phone.png"))
    # A call on the line leads to the call in the conversation.
    line.locator("[data-lane='model'] a").nth(1).click()
    assert page.url.endswith("#call-1-2")
    expect(page.locator("#call-1-2")).to_be_in_viewport()


def test_keys_walk_the_seeds_and_jump_to_the_next_failure(page, dashboard_user):
    with orm_allowed():
        job = job_rows.job_make(owner=dashboard_user, seeds=list(range(6)))
        job_rows.job_start(job=job)
        for run in SeedRun.objects.filter(job=job).order_by("seed"):
            error = "task app answered HTTP 500: crashed" if run.seed in (3, 5) else None
            job_rows.seed_complete(seed_run=run, score=0.5, error=error)
        job_rows.job_finish(job=job)

    def at(seed: int) -> None:
        expect(page.get_by_role("heading", name=f"Seed {seed}")).to_be_visible()

    sign_in(page, path=f"/jobs/{job.id}/seeds/0/")
    expect(page.locator("[data-key-help]")).to_contain_text("j or → next seed")
    expect(page.locator("[data-key-help]")).to_contain_text("f next failure")
    press(page, "j")
    at(1)
    press(page, "ArrowRight")
    at(2)
    press(page, "k")
    at(1)
    press(page, "ArrowLeft")
    at(0)
    press(page, "k")  # the first seed has no previous: nothing happens
    press(page, "f")
    at(3)
    press(page, "f")
    at(5)
    # Not while typing, nor with a modifier (the browser's own shortcuts).
    page.evaluate("document.querySelector('main').prepend(document.createElement('input'))")
    page.locator("main input").first.type("jk")
    press(page, "Control+j")
    at(5)
    expect(page).to_have_url(f"{page.url.split('/jobs/')[0]}/jobs/{job.id}/seeds/5/")

    # The failures-only table: the keys walk its rows.
    page.goto(f"/jobs/{job.id}/seeds/3/?failures=1")
    press(page, "j")
    at(5)
    assert page.url.endswith("/seeds/5/?failures=1")
    press(page, "t")
    expect(page.locator("[data-seed-count]")).to_contain_text("2 matching, of 6")
