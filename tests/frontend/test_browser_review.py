"""The review queue in a real browser: a reviewer works through ten samples with the keyboard
alone, and the labels are then in the API, the CSV and the agreement figures."""

from __future__ import annotations

import csv
import io

import httpx
import pytest
from playwright.sync_api import expect

from jobs.apikeys import api_key_create_for_username
from tests.frontend import job_rows
from tests.support.browser import orm_allowed, press, screenshot, sign_in

pytestmark = pytest.mark.browser

# The task app passes seeds 0-6 (score 1.0), fails 7 and 8 (0.0); seed 9's rollout failed.
SCORES = {seed: 1.0 for seed in range(7)} | {7: 0.0, 8: 0.0}
# What the reviewer says: they disagree with the task app on seeds 6 and 8.
SAYS = {seed: "pass" for seed in range(6)} | {6: "fail", 7: "fail", 8: "pass", 9: "fail"}
KEYS = {"pass": "p", "fail": "f", "unsure": "u"}


def review_job(owner):
    job = job_rows.job_make(owner=owner, seeds=list(range(10)), pass_threshold=0.5, name="triage")
    job_rows.job_start(job=job)
    for run in job.seed_runs.order_by("seed"):
        failed = run.seed not in SCORES
        job_rows.seed_complete(
            seed_run=run, score=SCORES.get(run.seed), error="boom" if failed else None
        )
    job_rows.job_finish(job=job)
    return job


def test_a_reviewer_labels_ten_samples_with_the_keyboard_alone(page, web_server, dashboard_user):
    with orm_allowed():
        job = review_job(dashboard_user)
        _, key = api_key_create_for_username(username="alice")
    sign_in(page, path=f"/jobs/{job.id}/review/")
    current = page.locator("[data-review]")
    labelled = page.locator("[data-labelled]")
    # Failures first: the zeros (seeds 7, 8, then the failed 9), then the passing ones.
    expect(current).to_have_attribute("data-seed", "7")
    expect(page.locator("[data-to-label]")).to_have_text("10")
    press(page, "j")
    expect(current).to_have_attribute("data-seed", "8")
    press(page, "k")
    expect(current).to_have_attribute("data-seed", "7")
    screenshot(page, "review")

    order = []
    for done in range(10):
        expect(labelled).to_have_text(str(done))
        seed = int(current.get_attribute("data-seed"))
        order.append(seed)
        if seed == 9:
            press(page, "/")
            page.keyboard.type("the tool was never called")
            press(page, "Escape")
            press(page, "t")
            page.keyboard.type("env-bug")
            press(page, "Escape")
        if seed == 6:
            press(page, "s")
            page.keyboard.type("0.3")
            press(page, "Escape")
        press(page, KEYS[SAYS[seed]])
    expect(page.locator("[data-review-done]")).to_be_visible()
    expect(labelled).to_have_text("10")
    assert order == [7, 8, 9, 0, 1, 2, 3, 4, 5, 6]

    api = httpx.Client(base_url=web_server, headers={"Authorization": f"Bearer {key}"})
    answer = api.get(f"/api/eval/jobs/{job.id}/labels").json()
    assert {label["seed"]: label["verdict"] for label in answer["labels"]} == SAYS
    noted = next(label for label in answer["labels"] if label["seed"] == 9)
    assert (noted["notes"], noted["tags"], noted["author"]) == (
        "the tool was never called", ["env-bug"], "alice"
    )  # fmt: skip
    # Task app / people: 8 of 10 agree; both pass 7 of 10: p_e = 0.49 + 0.09 = 0.58,
    # kappa = (0.8 - 0.58) / 0.42 = 0.5238.
    people = answer["agreement"]["pairs"]["task_app_people"]
    assert (people["samples"], people["agreement"]) == (10, 0.8)
    assert people["kappa"] == pytest.approx(0.22 / 0.42)

    text = api.get(f"/api/eval/jobs/{job.id}/results.csv").text
    rows = {int(row["seed"]): row for row in csv.DictReader(io.StringIO(text))}
    assert {seed: row["label_verdict"] for seed, row in rows.items()} == SAYS
    assert (rows[6]["label_score"], rows[9]["label_tags"]) == ("0.3", "env-bug")

    page.goto(f"/jobs/{job.id}/")
    figures = page.locator("[data-agreement='task_app_people']")
    expect(figures.locator("[data-samples]")).to_have_text("10")
    expect(figures.locator("[data-kappa]")).to_contain_text("0.524")
    expect(page.locator("[data-num-labelled]")).to_contain_text("10 of 10")
    page.locator("#agreement").scroll_into_view_if_needed()
    screenshot(page, "review-agreement")
