"""The job page's seed table read a page at a time (frontend/seed_table.py): the filter and order
in SQL, the same rows in the same order as the whole table, pages that keep the filter, and the
seed page's neighbours in that order. And the figures kept with a job (jobs/figures.py): the
same as computed from its rows, computed again when the rows may have changed."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.http import QueryDict
from django.test import Client
from django.utils import timezone

from frontend import exchange, job_page, seed_table, triage
from jobs import figures, reruns, stats
from jobs.models import EvalJob, JobFigures, RolloutAttempt, SeedRun, SeedStatus
from tests.frontend import job_rows
from traces.calls import recording as services
from traces.models import LLMCall
from traces.results import result_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="x" * 12)


@pytest.fixture
def web(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def ended_long_ago(job) -> None:
    """Past the moment its rows are taken as final (`jobs.figures.SETTLE_S`)."""
    ago = timezone.now() - timedelta(seconds=2 * figures.SETTLE_S)
    EvalJob.objects.filter(pk=job.pk).update(completed_at=ago)
    job.refresh_from_db()


def shown(job, **params) -> list[int]:
    query = triage.TableQuery.from_query(QueryDict(mutable=True) | params)
    return [r.seed for r in seed_table.seed_runs_shown(job=job, query=query)]


def seeds_in_table(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<tr class="seed-\w+" data-seed="(-?\d+)"', html)]


def test_filter_and_sort_in_sql_with_missing_values_last(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1, 2, 3])
    job_rows.job_start(job=job)
    runs = {r.seed: r for r in SeedRun.objects.filter(job=job)}
    job_rows.seed_complete(seed_run=runs[0], score=0.2)
    job_rows.seed_complete(seed_run=runs[1], error="task app answered HTTP 500: boom")
    job_rows.seed_complete(seed_run=runs[2], score=0.9)
    assert shown(job, failures="1") == [1]
    assert shown(job, min_score="0.5") == [2]
    assert shown(job, sort="-score") == [2, 0, 1, 3]
    assert shown(job, sort="score") == [0, 2, 1, 3]
    assert shown(job, sort="-seed") == [3, 2, 1, 0]
    # Seed 3 is pending: no calls, so 0 tokens; its cost is 0 as well (nothing unknown).
    assert shown(job, sort="-tokens") == [2, 1, 0, 3]
    assert shown(job, error="task app answered HTTP 500") == [1]


def test_an_unknown_cost_sorts_last_as_the_table_shows_it(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1, 2])
    job_rows.job_start(job=job)
    for run in SeedRun.objects.filter(job=job).order_by("seed"):
        job_rows.seed_complete(seed_run=run)
    job_rows.attempt_record(seed_run=SeedRun.objects.get(job=job, seed=1), number=2, cost=None)
    rows = {r["seed"]: r for r in result_rows.job_results(job=job)[1]}
    assert rows[1]["cost_usd"] is None
    assert shown(job, sort="cost_usd") == [0, 2, 1]
    assert shown(job, sort="-cost_usd") == [2, 0, 1]


def test_pages_keep_the_filter_and_sort_and_cover_every_matching_seed_once(web, owner):
    job = job_rows.job_make(owner=owner, seeds=list(range(60)))
    job_rows.job_start(job=job)
    for run in SeedRun.objects.filter(job=job).order_by("seed"):
        error = "task app answered HTTP 500: crash" if run.seed % 3 == 0 else None
        job_rows.seed_complete(seed_run=run, score=(run.seed % 7) / 7, error=error)
    job_rows.job_finish(job=job)
    params = {"failures": "1", "sort": "-seed", "per_page": "25"}
    first = web.get(f"/jobs/{job.id}/", params).content.decode()
    assert seeds_in_table(first) == list(range(57, -1, -3))[:20]
    assert "(20 matching, of 60)" in first  # one page: no pager
    assert 'rel="next"' not in first

    params = {"sort": "-seed", "per_page": "25"}
    pages, url = [], f"/jobs/{job.id}/?sort=-seed&per_page=25"
    while url:
        html = web.get(url).content.decode()
        pages.append(seeds_in_table(html))
        found = re.search(r'href="(\?[^"]*)#seeds" rel="next"', html)
        url = f"/jobs/{job.id}/" + found.group(1).replace("&amp;", "&") if found else None
        if found:
            assert "sort=-seed" in found.group(1) and "per_page=25" in found.group(1)
    assert [len(p) for p in pages] == [25, 25, 10]
    assert [s for p in pages for s in p] == list(range(59, -1, -1))
    assert "Page 3 of 3" in html and 'rel="prev"' in html and 'rel="first"' in html
    # An unknown page size is the default one (100: all 60 seeds on one page).
    html = web.get(f"/jobs/{job.id}/", {"per_page": "7"}).content.decode()
    assert len(seeds_in_table(html)) == 60


def test_seed_page_neighbours_follow_the_paged_order_across_pages(web, owner):
    job = job_rows.job_make(owner=owner, seeds=list(range(30)))
    job_rows.job_run_all(job=job, scores={s: (s % 5) / 5 for s in range(30)})
    # Ordered by -score then -seed: 29, 24, 19, ... (score 0.8), then 28, 23, ... (0.6).
    order = shown(job, sort="-score")
    assert order[:7] == [29, 24, 19, 14, 9, 4, 28]
    page = web.get(f"/jobs/{job.id}/seeds/4/", {"sort": "-score"}).content.decode()
    assert f'href="/jobs/{job.id}/seeds/9/?sort=-score" rel="prev"' in page
    assert f'href="/jobs/{job.id}/seeds/28/?sort=-score" rel="next"' in page
    assert "(6 of 30)" in page


def test_kept_figures_equal_the_computed_ones_and_are_read_not_recomputed(owner):
    job = job_rows.job_make(owner=owner, seeds=list(range(12)), repeats=2, pass_threshold=0.5)
    job_rows.job_run_all(job=job, scores={s: (s % 4) / 4 for s in range(12)})
    ended_long_ago(job)
    computed_summary, rows = result_rows.job_results(job=job)
    computed_seeds = result_rows.job_figures(job=job, rows=rows)["seeds"]
    kept = result_rows.kept_figures(job=job, names=("summary", "seeds"))
    assert kept == {"summary": computed_summary, "seeds": computed_seeds}
    assert JobFigures.objects.filter(job=job, settled=True).count() == 2
    # Read back from the store: the same values through JSON.
    assert result_rows.kept_figures(job=job, names=("summary", "seeds")) == kept
    page = job_page.job_page_figures(job=job)
    assert page["summary"] == computed_summary
    assert page["seed_figures"] == computed_seeds[: job_page.SEED_FIGURES_SHOWN]
    assert page["model_rows"] == exchange.model_breakdown(job=job)
    assert page["failure_groups"] == triage.failure_groups(rows)
    # The stats' definitions are the same: pass@k from per-seed counts.
    samples = [stats.Sample(r["seed"], r["repeat"], r["status"], r["score"]) for r in rows]
    direct = stats.job_figures(samples, repeats=2, threshold=0.5)
    assert kept["summary"]["pass_at_k"] == direct["pass_at_k"]


def test_a_running_job_is_computed_on_every_read_and_kept_once_it_ends(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1, 2])
    job_rows.job_start(job=job)
    runs = list(SeedRun.objects.filter(job=job).order_by("seed"))
    job_rows.seed_complete(seed_run=runs[0], score=1.0)
    assert result_rows.job_summary(job)["num_successful"] == 1
    job_rows.seed_complete(seed_run=runs[1], score=0.0)
    assert result_rows.job_summary(job)["num_successful"] == 2
    assert not JobFigures.objects.filter(job=job).exists()  # small and running: never kept
    job_rows.seed_complete(seed_run=runs[2], score=0.5)
    job_rows.job_finish(job=job)
    job.refresh_from_db()
    # Just ended: calls may still be on their way to the database (SETTLE_S).
    assert result_rows.job_summary(job)["num_successful"] == 3
    assert not JobFigures.objects.filter(job=job).exists()
    ended_long_ago(job)
    assert result_rows.job_summary(job)["num_successful"] == 3
    assert JobFigures.objects.get(job=job, name="summary").settled


def test_a_cancelled_job_with_a_sample_still_running_is_not_kept_as_final(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1])
    job_rows.job_start(job=job)
    runs = list(SeedRun.objects.filter(job=job).order_by("seed"))
    job_rows.seed_complete(seed_run=runs[0], score=1.0)
    SeedRun.objects.filter(pk=runs[1].pk).update(status=SeedStatus.RUNNING)
    job_rows.job_finish(job=job, status="cancelled")
    ended_long_ago(job)
    assert result_rows.job_summary(job)["num_successful"] == 1
    assert not JobFigures.objects.filter(job=job, settled=True).exists()
    # The running sample ends after the cancel: the figures say so.
    job_rows.seed_complete(seed_run=SeedRun.objects.get(pk=runs[1].pk), score=1.0)
    assert result_rows.job_summary(job)["num_successful"] == 2
    assert JobFigures.objects.get(job=job, name="summary").settled


def test_forgotten_figures_are_computed_again_from_the_rows(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1])
    job_rows.job_run_all(job=job, scores={0: 1.0, 1: 0.0})
    ended_long_ago(job)
    assert result_rows.job_summary(job)["mean_score"] == 0.5
    # Rows changed behind the store's back (nothing in evalhub does this to a settled job):
    # the kept figures stay as they were until forgotten.
    SeedRun.objects.filter(job=job, seed=1).update(score=1.0)
    assert result_rows.job_summary(job)["mean_score"] == 0.5
    figures.forget(job_id=job.id)
    assert result_rows.job_summary(job)["mean_score"] == 1.0


def test_a_rerun_has_figures_of_its_own_and_leaves_the_parents_as_computed(owner):
    parent = job_rows.job_make(owner=owner, seeds=[0, 1, 2])
    job_rows.job_start(job=parent)
    for run in SeedRun.objects.filter(job=parent).order_by("seed"):
        job_rows.seed_complete(
            seed_run=run, error="task app answered HTTP 500: x" if run.seed == 2 else None
        )
    job_rows.job_finish(job=parent)
    parent.refresh_from_db()
    before = result_rows.job_summary(parent)
    assert before["num_failed"] == 1
    rerun = reruns.job_rerun(parent=parent, seeds="failed")
    assert result_rows.job_summary(rerun)["num_pending"] == 1  # not the parent's figures
    job_rows.job_start(job=rerun)
    job_rows.seed_complete(seed_run=SeedRun.objects.get(job=rerun, seed=2), score=1.0)
    job_rows.job_finish(job=rerun)
    rerun.refresh_from_db()
    after = result_rows.job_summary(rerun)
    assert (after["num_successful"], after["num_failed"]) == (3, 0)
    assert after == result_rows.job_results(job=rerun)[0]
    assert result_rows.job_summary(parent) == before == result_rows.job_results(job=parent)[0]


def test_a_call_saved_after_the_figures_were_made_final_drops_them(owner):
    job = job_rows.job_make(owner=owner, seeds=[0, 1])
    job_rows.job_run_all(job=job)
    ended_long_ago(job)
    before = result_rows.job_summary(job)
    assert JobFigures.objects.filter(job=job, settled=True).exists()
    attempt = RolloutAttempt.objects.filter(seed_run__job=job).first()
    late = LLMCall(attempt=attempt, seq=0, request={"messages": []}, started_at=timezone.now(),
                   prompt_tokens=400, completion_tokens=100, total_tokens=500, cost_usd=0.001)  # fmt: skip
    services.llm_calls_save(calls=[late])
    assert not JobFigures.objects.filter(job=job).exists()
    after = result_rows.job_summary(job)
    assert after["total_tokens"] == before["total_tokens"] + 500
    assert after == result_rows.job_results(job=job)[0]


def test_an_error_class_of_distinct_messages_pages_and_walks_like_any_filter(web, owner):
    job = job_rows.job_make(owner=owner, seeds=list(range(40)))
    job_rows.job_start(job=job)
    for run in SeedRun.objects.filter(job=job).order_by("seed"):
        error = f"task app unreachable: ConnectError {run.seed}" if run.seed % 4 else None
        error = "task app answered HTTP 500: x" if run.seed % 10 == 5 else error
        job_rows.seed_complete(seed_run=run, error=error)
    job_rows.job_finish(job=job)
    unreachable = [s for s in range(40) if s % 4 and s % 10 != 5]
    params = {"error": "task app unreachable", "per_page": "25"}
    first = web.get(f"/jobs/{job.id}/", params).content.decode()
    second = web.get(f"/jobs/{job.id}/", {**params, "page": "2"}).content.decode()
    assert seeds_in_table(first) + seeds_in_table(second) == unreachable
    assert f"(1–25 of {len(unreachable)} matching, of 40)" in first
    page = web.get(f"/jobs/{job.id}/seeds/3/", {"error": "task app unreachable"}).content.decode()
    assert f'href="/jobs/{job.id}/seeds/2/?error=task+app+unreachable" rel="prev"' in page
    assert f'href="/jobs/{job.id}/seeds/6/?error=task+app+unreachable" rel="next"' in page
