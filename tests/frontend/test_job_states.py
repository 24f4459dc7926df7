"""What a job's state reads as on the jobs list and the job page, through Django's test client:
a job whose every sample failed says so, in red, wherever its status is shown."""

from __future__ import annotations

import re

from jobs.models import JobStatus, SeedRun
from tests.frontend import job_rows
from tests.frontend.test_views import alice, web  # noqa: F401  (fixtures)


def job_every_sample_failed(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1, 2], name="all broken")
    job_rows.job_start(job=job)
    for run in SeedRun.objects.filter(job=job):
        job_rows.seed_complete(seed_run=run, error="task app answered HTTP 500: crashed")
    job_rows.job_finish(job=job)
    return job


def badge(html: str, job_id: str | None = None) -> str:
    """The text and class of the status badge (of the job's row, on the jobs list)."""
    if job_id:
        html = html.split(f'data-job-id="{job_id}"', 1)[1].split("</tr>", 1)[0]
    found = re.search(r'<span class="badge badge-(\w+)[^"]*" data-status-badge[^>]*>([^<]+)<', html)
    return f"{found.group(2)} ({found.group(1)})"


def test_a_job_whose_every_sample_failed_reads_all_failed(web, alice):  # noqa: F811
    broken = job_every_sample_failed(alice)
    fine = job_rows.job_run_all(job=job_rows.job_make(owner=alice, seeds=[0]))

    jobs = web.get("/").content.decode()
    assert badge(jobs, broken.id) == "all failed (failed)"
    assert badge(jobs, fine.id) == "completed (completed)"
    page = web.get(f"/jobs/{broken.id}/").content.decode()
    assert badge(page) == "all failed (failed)"
    alert = re.search(r"<p [^>]*data-all-failed>(.*?)</p>", page, re.S).group(1)
    assert "Every sample failed (3 of 3)" in alert
    assert "task app answered HTTP 500" in alert  # the most common error, linked
    assert "data-all-failed" not in web.get(f"/jobs/{fine.id}/").content.decode()

    # The pages' live updates carry the same badge.
    assert web.get(f"/jobs/{broken.id}/progress.json").json()["shown"]["text"] == "all failed"
    listed = web.get(f"/jobs/progress.json?ids={broken.id},{fine.id}").json()["jobs"]
    assert listed[broken.id]["shown"] == {
        "text": "all failed",
        "badge": "failed",
        "title": "The job completed, but every sample failed (3 of 3).",
    }
    assert listed[fine.id]["shown"]["text"] == "completed"


def test_a_running_job_with_only_failures_so_far_is_still_running(web, alice):  # noqa: F811
    job = job_rows.job_make(owner=alice, seeds=[0, 1])
    job_rows.job_start(job=job)
    job_rows.seed_complete(seed_run=SeedRun.objects.get(job=job, seed=0), error="boom")
    assert badge(web.get(f"/jobs/{job.id}/").content.decode()) == "running (running)"
    job_rows.job_finish(job=job, status=JobStatus.CANCELLED)
    assert badge(web.get("/").content.decode(), job.id) == "cancelled (cancelled)"


def test_the_judges_calls_are_apart_and_its_words_are_not_an_error(web, alice):  # noqa: F811
    job = job_rows.job_make(
        owner=alice, seeds=[0, 1], verifier_config={"enabled": True, "backend_model": "gpt-4o"}
    )
    job_rows.job_run_all(job=job)
    for run in SeedRun.objects.filter(job=job):
        job_rows.judge_record(seed_run=run, verdict=0.5, justification="Half right: no units.")
    html = web.get(f"/jobs/{job.id}/").content.decode()

    cost_card = re.search(r'data-figure="cost">([^<]+)<', html).group(1)
    assert cost_card == "$0.000800"  # the policy's 4 calls
    models = html.split('id="models"', 1)[1].split("</section>", 1)[0]
    rows = re.findall(r'<tr (?:data-model="[^"]+" data-kind|class="total" data-total)="(\w+)">'
                      r"(.*?)</tr>", models, re.S)  # fmt: skip
    cells = [(kind, re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)) for kind, row in rows]
    shown = [(kind, re.sub("<[^>]+>", "", c[0]), c[2], c[-1]) for kind, c in cells]
    assert shown == [
        ("policy", "gpt-4o-mini-2024-07-18", "4", "$0.000800"),
        ("judge", job_rows.JUDGE_MODEL, "2", "$0.001000"),
        ("policy", "total", "4", cost_card),
        ("judge", "total", "2", "$0.001000"),
    ]
    judge_card = re.search(r"Judge cost</span><span class=\"value\">([^<]+)<", html).group(1)
    assert judge_card == "$0.001000"

    verdicts = html.split('id="verdicts"', 1)[1].split("</section>", 1)[0]
    assert '<td class="justification" data-justification>Half right: no units.</td>' in verdicts
    assert 'class="err"' not in verdicts
