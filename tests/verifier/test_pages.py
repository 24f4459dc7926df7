"""The verdicts on the job page and the seed page, in a real browser (see tests/frontend/)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from jobs.models import SeedRun
from tests.frontend.conftest import (  # noqa: F401
    chromium,
    dashboard_user,
    dashboard_web,
    page,
    web_server,
)
from tests.frontend.test_browser import JOB_TIMEOUT_MS, job_post, worker_start
from tests.support.browser import orm_allowed, screenshot, sign_in
from tests.support.servers import serve_asgi
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.browser


def test_job_and_seed_pages_show_the_verdicts(page, web_server, worker_factory):  # noqa: F811
    app, _ = task_app_create()
    verifier = {"enabled": True, "reward_source": "fused", "weight_env": 1, "weight_outcome": 1}
    with serve_asgi(app) as task_app_url:
        worker_start(worker_factory, web_server)
        job_id = job_post(
            web_server, task_app_url=task_app_url, seeds=[0, 1], verifier_config=verifier
        )
        sign_in(page, path=f"/jobs/{job_id}/")
        expect(page.locator("#job [data-status-badge]")).to_have_text(
            "completed", timeout=JOB_TIMEOUT_MS
        )
    page.reload()
    with orm_allowed():
        runs = {sr.seed: sr for sr in SeedRun.objects.filter(job_id=job_id)}
    verdicts = page.locator("#verdicts")
    expect(verdicts).to_contain_text("reward from fused")
    expect(verdicts.locator("[data-mean-verifier-score]")).to_have_text(
        f"{(runs[0].verifier_score + runs[1].verifier_score) / 2:.3f}"
    )
    row = verdicts.locator("tr[data-verdict-seed='1']")
    expect(row).to_contain_text(f"{score_of(1):.3f}")
    expect(row).to_contain_text(f"{runs[1].verifier_score:.3f}")
    expect(row).to_contain_text(f"{(score_of(1) + runs[1].verifier_score) / 2:.3f}")
    expect(row).to_contain_text(runs[1].verifier_justification)
    screenshot(page, "job-page-verdicts")

    row.get_by_role("link", name="1").click()
    verdict = page.locator("#verdict")
    expect(verdict.locator("[data-judge-status]")).to_have_text("done")
    expect(verdict.locator("[data-task-app-score]")).to_have_text(f"{score_of(1):.3f}")
    expect(verdict.locator("[data-verifier-score]")).to_have_text(f"{runs[1].verifier_score:.3f}")
    expect(verdict.locator("[data-justification]")).to_have_text(runs[1].verifier_justification)
    expect(verdict).to_contain_text("960")  # the judge's tokens, apart from the policy's
    # The judge's call is on the verdict, not in the policy's conversation.
    expect(page.locator(".verdict-table")).to_have_count(0)
    assert "evalhub_verdict" not in page.content()
    screenshot(page, "seed-page-verdict")
