"""Every page of the dashboard in a real browser, as a person reads it: no template syntax
(`{#`, `{%`, `{{`) in any page's text, whatever the page shows (a verifier's verdicts, tool
executions, a comparison, a failed seed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from jobs.models import SeedRun
from tests.frontend import job_rows
from tests.frontend.test_job_states import job_every_sample_failed
from tests.support.browser import orm_allowed, screenshot, sign_in

pytestmark = pytest.mark.browser

TEMPLATES = Path(__file__).resolve().parents[2] / "frontend" / "templates"
TEMPLATE_SYNTAX = re.compile(r"\{#|\{%|\{\{")
VERIFIER = {"enabled": True, "backend_model": "gpt-4o", "reward_source": "task_app"}
LONG_NAME = "weather-agent-nightly-regression-" * 6 + "with-every-tool-and-a-long-suffix"
TOOL_EXECUTIONS = [
    {"step": 1, "call_id": "call_1", "name": "multiply", "arguments": {"a": 17, "b": 23},
     "result": "391", "error": None, "duration_ms": 120.0, "reward": None, "done": False},
]  # fmt: skip


def jobs_of_every_kind(owner):
    """A judged job with a failed seed and tool executions, and a second job to compare."""
    base = job_rows.job_make(
        owner=owner, seeds=[0, 1, 2], name="baseline", verifier_config=VERIFIER
    )
    job_rows.job_start(job=base)
    runs = list(SeedRun.objects.filter(job=base).order_by("seed"))
    for run in runs[:2]:
        job_rows.seed_complete(seed_run=run, score=1.0)
        job_rows.judge_record(seed_run=run, verdict=0.8, justification="Right product, shown.")
    job_rows.seed_complete(seed_run=runs[2], error="task app answered HTTP 500: crashed")
    SeedRun.objects.filter(pk=runs[0].pk).update(
        task_trace={"kind": "mcp_gym", "tool_executions": TOOL_EXECUTIONS}
    )
    job_rows.job_finish(job=base)
    candidate = job_rows.job_make(owner=owner, seeds=[0, 1, 2], name="candidate")
    job_rows.job_run_all(job=candidate, scores={0: 0.0, 1: 1.0, 2: 1.0})
    return base, candidate


def test_no_template_syntax_in_any_template_comment():
    """Django prints a `{# … #}` that spans lines as text: every template comment of more than
    one line is a `{% comment %}` block."""
    for path in TEMPLATES.rglob("*.html"):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            assert "{#" not in line or "#}" in line, f"{path.name}:{number}: use {{% comment %}}"


def test_no_page_shows_template_syntax(page, dashboard_user):
    with orm_allowed():
        base, candidate = jobs_of_every_kind(dashboard_user)
        broken = job_every_sample_failed(dashboard_user)
        job_rows.job_make(owner=dashboard_user, seeds=[0], name=LONG_NAME)
    pair = f"base={base.id}&candidate={candidate.id}"
    page.goto("/login/")
    pages = {"sign-in": "/login/"}
    assert not TEMPLATE_SYNTAX.search(page.locator("body").inner_text())
    sign_in(page)
    pages.update({
        "jobs": "/",
        "jobs, filtered": "/?status=completed&q=base",
        "job": f"/jobs/{base.id}/",
        "job, failures": f"/jobs/{base.id}/?failures=1#seeds",
        "job, all failed": f"/jobs/{broken.id}/",
        "seed": f"/jobs/{base.id}/seeds/0/",
        "failed seed": f"/jobs/{base.id}/seeds/2/",
        "compare": f"/compare/?{pair}",
        "compared seed": f"/compare/seeds/0/?{pair}",
        "keys": "/keys/",
        "API docs": "/api/docs",
    })  # fmt: skip
    for name, path in pages.items():
        page.goto(path)
        if name == "API docs":
            expect(page.get_by_role("heading", name="evalhub API").first).to_be_visible()
        text = page.locator("body").inner_text()
        assert text.strip(), name
        found = TEMPLATE_SYNTAX.search(text)
        assert found is None, (
            f"{name} ({path}) shows {text[max(0, found.start() - 80) : found.end() + 80]!r}"
        )
    page.goto("/")
    expect(page.locator(f"tr[data-job-id='{broken.id}'] [data-status-badge]")).to_have_text(
        "all failed"
    )
    # A long name is cut with an ellipsis (whole in its tooltip): the table fits the screen.
    long_name = page.locator(".jobname", has_text="weather-agent-nightly").first
    expect(long_name).to_have_attribute("title", LONG_NAME)
    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert page.evaluate("document.querySelector('table.jobs').scrollWidth") <= width
    page.set_viewport_size({"width": 1280, "height": 800})
    screenshot(page, "jobs-list-states")
    page.goto(f"/jobs/{broken.id}/")
    expect(page.locator("[data-all-failed]")).to_contain_text("Every sample failed (3 of 3)")
    screenshot(page, "job-all-failed")
    page.goto(f"/jobs/{base.id}/")
    expect(page.locator("#verdicts")).to_contain_text("Right product, shown.")
    screenshot(page, "job-judged")
    with page.expect_download() as download:
        page.get_by_role("link", name="SFT data (JSONL)").click()
    lines = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    assert [line["seed"] for line in lines] == [0, 1]  # the samples that passed
    assert download.value.suggested_filename == f"{base.id}-sft.jsonl"
