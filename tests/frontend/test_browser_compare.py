"""The compare page in a real browser: seeds read worst first (pass → fail, lower, fail → pass,
higher, the same), the ties hidden on request, and the side-by-side page walking the compared
seeds in that order."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.frontend import job_rows
from tests.support.browser import orm_allowed, press, screenshot, sign_in

pytestmark = pytest.mark.browser

# seed: (base score, candidate score); the pass threshold is 1.0 (a score of 1 passes).
SCORES = {
    0: (1.0, 1.0),  # the same
    1: (1.0, 0.0),  # pass → fail, −1
    2: (0.4, 0.7),  # higher, +0.3
    3: (0.0, 1.0),  # fail → pass, +1
    4: (0.5, 0.2),  # lower, −0.3
    5: (0.3, 0.3),  # the same
    6: (0.2, 0.9),  # higher, +0.7
    7: (1.0, 0.5),  # pass → fail, −0.5
}
ORDER = ["1", "7", "4", "3", "6", "2", "0", "5"]
OUTCOMES = ["regression", "regression", "loss", "improvement", "win", "win", "tie", "tie"]


def test_compare_reads_worst_first_hides_ties_and_walks_the_seeds(page, dashboard_user):
    with orm_allowed():
        jobs = {}
        for side, index in (("base", 0), ("candidate", 1)):
            job = job_rows.job_make(owner=dashboard_user, seeds=list(SCORES), name=side)
            jobs[side] = job_rows.job_run_all(
                job=job, scores={seed: pair[index] for seed, pair in SCORES.items()}
            )
    pair = f"base={jobs['base'].id}&candidate={jobs['candidate'].id}"
    sign_in(page, path=f"/compare/?{pair}")
    rows = page.locator("table.compare tbody tr")
    expect(rows).to_have_count(8)
    assert [rows.nth(i).get_attribute("data-seed") for i in range(8)] == ORDER
    assert [rows.nth(i).get_attribute("data-outcome") for i in range(8)] == OUTCOMES
    expect(rows.nth(0).locator(".badge")).to_have_text("pass → fail")
    expect(rows.nth(3).locator(".badge")).to_have_text("fail → pass")
    # Coloured: a regression's delta in red, a win's in green, a tie's muted.
    red, green = "rgb(192, 57, 43)", "rgb(27, 127, 75)"
    expect(rows.nth(0).locator(".delta")).to_have_css("color", red)
    expect(rows.nth(4).locator(".delta")).to_have_css("color", green)
    expect(rows.nth(6).locator(".delta")).not_to_have_css("color", green)
    # The two kinds of counts are told apart.
    expect(page.locator("[data-figure='wins']")).to_contain_text("Higher / lower / same")
    expect(page.locator("[data-figure='wins']")).to_contain_text("3 / 3 / 2")
    expect(page.locator("[data-figure='regressions']")).to_contain_text("Pass → fail / fail → pass")
    expect(page.locator("[data-figure='regressions']")).to_contain_text("2 / 1")
    screenshot(page, "compare-ordered")
    with page.expect_download() as download:
        page.get_by_role("link", name="Seeds (CSV)").click()
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0].startswith("seed,base_score,candidate_score,delta")
    assert [line.split(",")[0] for line in lines[1:]] == ORDER
    assert [line.split(",")[-1] for line in lines[1:]] == OUTCOMES

    page.locator("[data-hide-ties]").check()
    expect(rows).to_have_count(6)
    expect(page).to_have_url(f"{page.url.split('?')[0]}?{pair}&ties=hide#seeds")
    expect(page.locator("table.compare tr[data-outcome='tie']")).to_have_count(0)
    expect(page.locator("[data-compare-count]")).to_contain_text("6 of 8, ties hidden")
    page.locator("[data-sort-delta]").click()  # the sort keeps the ties hidden
    expect(rows.first).to_have_attribute("data-seed", "1")
    expect(rows).to_have_count(6)
    page.goto(f"/compare/?{pair}&ties=hide")

    # From the first seed to the last, in the page's order, the ties left out.
    rows.first.locator("a").click()
    walked = []
    for _ in range(6):
        heading = page.get_by_role("heading", name="side by side")
        expect(heading).to_be_visible()
        walked.append(heading.inner_text().split()[1].rstrip(","))
        nxt = page.locator("a[rel='next']")
        if not nxt.count():
            break
        nxt.click()
    assert walked == ORDER[:6]
    expect(page.locator("nav[aria-label='Other compared seeds']")).to_contain_text("6 of 6")
    page.locator("a[rel='prev']").click()
    expect(page.get_by_role("heading", name="Seed 6, side by side")).to_be_visible()
    expect(page.locator("h1 .badge")).to_have_text("higher")
    screenshot(page, "compare-seed")
    press(page, "j")  # the keys of the seed page walk the compared seeds too
    expect(page.get_by_role("heading", name="Seed 2, side by side")).to_be_visible()
    press(page, "k")
    expect(page.get_by_role("heading", name="Seed 6, side by side")).to_be_visible()
    press(page, "t")
    expect(page.locator("[data-compare-count]")).to_contain_text("6 of 8, ties hidden")
