"""The review queue through Django's test client: the orders, a label posted by the form and
the next sample without one, bad input said on the page, another account's job 404."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.labels import LabelChange, label_save
from jobs.models import SampleLabel, Verdict
from jobs.reruns import job_rerun
from jobs.review import review_queue
from tests.frontend import job_rows
from tests.frontend.test_views import alice, bob, csrf_token, web  # noqa: F401 (fixtures)
from traces.calls import reuse

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice):  # noqa: F811
    made = job_rows.job_make(owner=alice, seeds=[0, 1, 2, 3], pass_threshold=0.5)
    job_rows.job_start(job=made)
    for run in made.seed_runs.order_by("seed"):
        score = {0: 1.0, 1: 0.2, 2: None, 3: 0.7}[run.seed]
        job_rows.seed_complete(
            seed_run=run, score=score, error=None if score is not None else "boom"
        )
    job_rows.job_finish(job=made)
    # Judged as the worker records it: the task app's own score kept apart.
    made.seed_runs.filter(seed=0).update(
        judge_status="done", verifier_score=0.1, task_app_score=1.0
    )
    made.seed_runs.filter(seed=3).update(
        judge_status="done", verifier_score=0.55, task_app_score=0.7
    )
    return made


def test_the_orders_put_failures_disagreements_and_doubtful_verdicts_first(job):
    assert review_queue(job=job, order="failures").samples == [(2, 0), (1, 0), (3, 0), (0, 0)]
    # Seed 0: the task app 1.0, the judge 0.1: far apart; seed 3: 0.7 and 0.55.
    assert review_queue(job=job, order="disagreements").samples[:2] == [(0, 0), (3, 0)]
    # The judge's 0.55 is nearer the 0.5 threshold than its 0.1.
    assert review_queue(job=job, order="confidence").samples[:2] == [(3, 0), (0, 0)]
    shuffled = review_queue(job=job, order="random", shuffle=7).samples
    assert sorted(shuffled) == [(s, 0) for s in range(4)]
    assert shuffled == review_queue(job=job, order="random", shuffle=7).samples
    with pytest.raises(ValueError):
        review_queue(job=job, order="best")


def test_a_label_from_the_form_goes_on_to_the_next_sample_without_one(web, job):  # noqa: F811
    page = web.get(f"/jobs/{job.id}/review/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-seed="2"' in html and "data-labelled>0<" in html
    assert job_rows.TASK_APP_KEY not in html
    token = csrf_token(web, f"/jobs/{job.id}/review/")
    answer = web.post(
        f"/jobs/{job.id}/review/label",
        {"csrfmiddlewaretoken": token, "seed": "2", "repeat": "0", "order": "failures",
         "verdict": "fail", "score": "0", "notes": "tool never called", "tags": "env-bug, flaky"},
    )  # fmt: skip
    assert answer.status_code == 302 and "seed=1" in answer["Location"]
    label = SampleLabel.objects.get()
    assert (label.verdict, label.score, label.notes, label.tags) == (
        "fail", 0.0, "tool never called", ["env-bug", "flaky"]
    )  # fmt: skip
    html = web.get(answer["Location"]).content.decode()
    assert 'data-seed="1"' in html and "data-labelled>1<" in html


def test_a_bad_score_is_said_on_the_page_and_nothing_is_saved(web, job):  # noqa: F811
    token = csrf_token(web, f"/jobs/{job.id}/review/")
    answer = web.post(
        f"/jobs/{job.id}/review/label",
        {"csrfmiddlewaretoken": token, "seed": "2", "verdict": "pass", "score": "lots"},
        follow=True,
    )
    assert "Not saved. score:" in answer.content.decode()
    assert not SampleLabel.objects.exists()


def test_another_account_cannot_open_nor_label_the_queue(job, bob):  # noqa: F811
    other = Client()
    other.force_login(bob)
    assert other.get(f"/jobs/{job.id}/review/").status_code == 404
    answer = other.post(f"/jobs/{job.id}/review/label", {"seed": "2", "verdict": "pass"})
    assert answer.status_code == 404 and not SampleLabel.objects.exists()


def test_the_job_page_shows_the_agreement_and_the_way_to_the_queue(web, job):  # noqa: F811
    html = web.get(f"/jobs/{job.id}/").content.decode()
    assert "data-review-link" in html and "0 of 4 samples labelled" in html
    assert 'data-agreement="task_app_judge"' in html


def test_a_rerun_seed_page_and_the_compare_page_show_the_labels(web, job, alice):  # noqa: F811
    run = job.seed_runs.get(seed=0)
    label_save(seed_run=run, author=alice, change=LabelChange(verdict=Verdict.FAIL, notes="hack"))
    child = job_rerun(
        parent=job, seeds="failed", policy=None, copy_attempt_children=reuse.llm_calls_copy
    )
    html = web.get(f"/jobs/{child.id}/seeds/0/").content.decode()
    assert "data-on-original" in html and "labelled on the original" in html and job.id[:17] in html
    html = web.get(f"/compare/?base={job.id}&candidate={child.id}").content.decode()
    assert "data-base-label" in html and "base: fail" in html and "candidate: fail" in html


def test_the_job_page_switches_the_score_to_peoples_labels(web, job, alice):  # noqa: F811
    label_save(
        seed_run=job.seed_runs.get(seed=2), author=alice,
        change=LabelChange(verdict=Verdict.PASS, score=1.0),
    )  # fmt: skip
    token = csrf_token(web, f"/jobs/{job.id}/")
    answer = web.post(
        f"/jobs/{job.id}/reward-source",
        {"csrfmiddlewaretoken": token, "reward_source": "human_else_task_app"},
    )
    assert answer.status_code == 302 and answer["Location"].endswith("#agreement")
    html = web.get(f"/jobs/{job.id}/").content.decode()
    # Seeds 0-3 score 1.0, 0.2, (failed, people: 1.0), 0.7: mean 2.9 / 4.
    assert "data-people-score" in html and "0.725" in html
    job.refresh_from_db()
    assert job.reward_source == "human_else_task_app"


@pytest.mark.parametrize(
    ("seed", "repeat"),
    [("99999999999999999999", "0"), ("2", "9999999999"), ("2", "-1"), ("x", "0"), ("7", "0")],
)
def test_a_sample_the_job_cannot_have_is_404_not_a_database_error(web, job, seed, repeat):  # noqa: F811
    token = csrf_token(web, f"/jobs/{job.id}/review/")
    answer = web.post(
        f"/jobs/{job.id}/review/label",
        {"csrfmiddlewaretoken": token, "seed": seed, "repeat": repeat, "verdict": "pass"},
    )
    assert answer.status_code == 404 and not SampleLabel.objects.exists()
    assert web.get(f"/jobs/{job.id}/review/?seed={seed}&repeat={repeat}").status_code == 404
