"""The dashboard's numbers through Django's test client: figures with their definitions, the
per-seed table of a job with repeats, search and tags, rerun, compare, the CSV download."""

from __future__ import annotations

import csv
import json

import pytest

from jobs.models import EvalJob, SeedRun
from tests.frontend import job_rows
from tests.frontend.test_views import alice, bob, csrf_token, web  # noqa: F401 - fixtures


def run(owner, scores: dict[int, float | None], **spec) -> EvalJob:
    """A finished job; a None score is a failed sample."""
    job = job_rows.job_make(owner=owner, seeds=sorted({s for s in scores}), **spec)
    job_rows.job_start(job=job)
    for seed_run in SeedRun.objects.filter(job=job):
        score = scores[seed_run.seed]
        job_rows.seed_complete(
            seed_run=seed_run, score=score, error=None if score is not None else "boom"
        )
    job_rows.job_finish(job=job)
    return job


def test_job_page_leads_with_the_name_and_defines_every_figure(web, alice):  # noqa: F811
    job = run(alice, {0: 1.0, 1: None, 2: 0.5}, name="gsm8k nightly", tags=["nightly"], repeats=2)
    html = web.get(f"/jobs/{job.id}/").content.decode()
    assert "<title>gsm8k nightly" in html
    heading = html.index('<h1 class="jobname">gsm8k nightly</h1>')
    assert heading < html.index(f'<p class="mono jobid small">{job.id}</p>')
    assert 'href="/?tag=nightly"' in html
    assert "over 6 samples, 2 failed counted 0" in html
    for figure in ("pass_rate", "pass@1", "pass@2", "ci", "mean_score_scored"):
        assert f'data-figure="{figure}"' in html, figure
    for footnote in ("fn-mean", "fn-scored", "fn-ci", "fn-pass", "fn-passk"):
        assert f'id="{footnote}"' in html, footnote
    assert 'id="seed-figures"' in html and "Rerun failed seeds" in html
    assert "?repeat=1" in html  # the second sample of each seed has its own link
    assert f"/jobs/{job.id}/seeds/0/?repeat=1" in html
    sample = web.get(f"/jobs/{job.id}/seeds/0/?repeat=1")
    assert sample.status_code == 200


def test_no_rerun_button_when_every_sample_succeeded(web, alice):  # noqa: F811
    job = run(alice, {0: 1.0})
    html = web.get(f"/jobs/{job.id}/").content.decode()
    assert "Rerun failed seeds" not in html and 'id="seed-figures"' not in html


def test_rerun_from_the_dashboard_makes_a_linked_job(web, alice):  # noqa: F811
    job = run(alice, {0: 1.0, 1: None})
    token = csrf_token(web, f"/jobs/{job.id}/")
    answer = web.post(f"/jobs/{job.id}/rerun", {"csrfmiddlewaretoken": token})
    child = EvalJob.objects.get(parent_job=job)
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{child.id}/"
    page = web.get(answer["Location"]).content.decode()
    assert "Rerun of" in page and job.id in page
    again = web.post(f"/jobs/{child.id}/rerun", {"csrfmiddlewaretoken": token}, follow=True)
    assert "Cannot rerun: job is pending" in again.content.decode()


def test_search_and_tag_filter_the_jobs_list(web, alice):  # noqa: F811
    tagged = run(alice, {0: 1.0}, name="alpha run", tags=["nightly"])
    other = run(alice, {0: 1.0}, name="beta run")
    html = web.get("/?tag=nightly").content.decode()
    assert tagged.id in html and other.id not in html
    html = web.get("/?q=BETA").content.decode()
    assert other.id in html and tagged.id not in html
    assert f'value="{tagged.id}" form="compare-form"' in web.get("/").content.decode()


def test_picking_two_jobs_compares_the_newer_against_the_older(web, alice, bob):  # noqa: F811
    older = run(alice, {0: 1.0, 1: 1.0})
    newer = run(alice, {0: 1.0, 1: 0.0})
    answer = web.get(f"/compare/?pick={newer.id}&pick={older.id}")
    assert answer["Location"] == f"/compare/?base={older.id}&candidate={newer.id}"
    html = web.get(answer["Location"]).content.decode()
    assert 'data-outcome="regression" class="outcome-regression"' in html and "−1.000" in html
    seed = web.get(f"/compare/seeds/1/?base={older.id}&candidate={newer.id}").content.decode()
    assert f"/jobs/{older.id}/seeds/1/" in seed and f"/jobs/{newer.id}/seeds/1/" in seed
    assert job_rows.TASK_APP_KEY not in html + seed
    theirs = run(bob, {0: 1.0})
    assert web.get(f"/compare/?base={older.id}&candidate={theirs.id}").status_code == 404
    assert web.get("/compare/").status_code == 404


def test_results_csv_downloads_with_the_session(web, alice):  # noqa: F811
    job = run(alice, {0: 1.0, 1: None})
    answer = web.get(f"/jobs/{job.id}/results.csv")
    text = b"".join(answer.streaming_content).decode()
    assert answer["Content-Type"] == "text/csv" and text.splitlines()[0].startswith("seed,repeat")
    assert len(text.splitlines()) == 3


@pytest.mark.parametrize("path", ["/compare/?base=x&candidate=y", "/jobs/x/results.csv"])
def test_numbers_pages_need_a_signed_in_user(client, db, path):
    assert client.get(path)["Location"].startswith("/login/")


def test_the_sft_export_and_the_comparison_download_with_the_session(web, alice):  # noqa: F811
    base = run(alice, {0: 1.0, 1: 1.0, 2: 0.0})
    candidate = run(alice, {0: 1.0, 1: 0.0, 2: 1.0})
    answer = web.get(f"/jobs/{base.id}/sft.jsonl")
    assert answer["Content-Type"] == "application/jsonl"
    assert answer["Content-Disposition"] == f'attachment; filename="{base.id}-sft.jsonl"'
    lines = [json.loads(line) for line in b"".join(answer.streaming_content).splitlines()]
    assert [line["seed"] for line in lines] == [0, 1]  # the passing samples only
    assert all(line["messages"][-1]["role"] == "assistant" for line in lines)
    assert (
        f'href="/jobs/{base.id}/sft.jsonl" download data-sft'
        in web.get(f"/jobs/{base.id}/").content.decode()
    )

    pair = f"base={base.id}&candidate={candidate.id}"
    answer = web.get(f"/compare/seeds.csv?{pair}")
    assert answer["Content-Type"] == "text/csv"
    rows = list(csv.reader(b"".join(answer.streaming_content).decode().splitlines()))
    assert rows[0] == ["seed", "base_score", "candidate_score", "delta", "base_passed",
                       "candidate_passed", "change"]  # fmt: skip
    assert [(r[0], r[-1]) for r in rows[1:]] == [("1", "regression"), ("2", "improvement"),
                                                  ("0", "tie")]  # fmt: skip
    hidden = web.get(f"/compare/seeds.csv?{pair}&ties=hide")
    assert len(b"".join(hidden.streaming_content).decode().splitlines()) == 3
    assert (
        f'href="/compare/seeds.csv?{pair.replace("&", "&amp;")}" download'
        in web.get(f"/compare/?{pair}").content.decode()
    )
    assert web.get(f"/compare/seeds.csv?base={base.id}").status_code == 404
