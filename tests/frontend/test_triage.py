"""Triage through Django's test client: the seed table's filter carried to the seed page's
previous / next / next failure, failures grouped by error, free-text search over seeds."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from frontend import triage
from jobs.models import SeedRun
from tests.frontend import job_rows
from traces.models import LLMCall

pytestmark = pytest.mark.django_db

HTTP_500 = "task app answered HTTP 500: environment crashed"
HTTP_422 = "task app answered HTTP 422: no weather station in Atlantis"


@pytest.fixture
def web(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user(username="alice", password="x" * 12))
    return client


@pytest.fixture
def job(web):
    """Seeds 0-7: 2 and 5 crash, 6 is refused, the rest succeed."""
    owner = get_user_model().objects.get(username="alice")
    job = job_rows.job_make(owner=owner, seeds=list(range(8)))
    job_rows.job_start(job=job)
    errors = {2: HTTP_500, 5: HTTP_500, 6: HTTP_422}
    for run in SeedRun.objects.filter(job=job).order_by("seed"):
        job_rows.seed_complete(seed_run=run, score=run.seed / 10, error=errors.get(run.seed))
    job_rows.job_finish(job=job)
    return job


def seeds_in_table(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<tr class="seed-\w+" data-seed="(-?\d+)"', html)]


def test_error_class_keeps_the_kind_and_drops_the_particulars():
    assert triage.error_class(HTTP_500) == "task app answered HTTP 500"
    assert triage.error_class("task app unreachable: ConnectError 1234567") == (
        "task app unreachable"
    )
    assert triage.error_class("run 12345678 lost") == "run … lost"
    assert triage.error_class(None) == ""


def test_failures_are_grouped_by_error_and_a_group_filters_the_table(web, job):
    html = web.get(f"/jobs/{job.id}/").content.decode()
    groups = re.findall(r'data-error-class="([^"]+)"[^>]*><b>(\d+)</b>', html)
    assert groups == [("task app answered HTTP 500", "2"), ("task app answered HTTP 422", "1")]
    html = web.get(f"/jobs/{job.id}/", {"failures": "1", "error": "task app answered HTTP 500"})
    assert seeds_in_table(html.content.decode()) == [2, 5]


def test_search_finds_seeds_by_error_text_and_by_message_content(web, job):
    html = web.get(f"/jobs/{job.id}/", {"q": "ATLANTIS"}).content.decode()
    assert seeds_in_table(html) == [6]
    # Every seed's conversation asks "Seed <n>: what is 17 * 23?" (tests/frontend/job_rows.py).
    html = web.get(f"/jobs/{job.id}/", {"q": "Seed 3: what"}).content.decode()
    assert seeds_in_table(html) == [3]
    assert "(1 matching, of 8)" in html


def test_the_seed_page_walks_the_filtered_and_sorted_rows_and_finds_the_next_failure(web, job):
    page = web.get(f"/jobs/{job.id}/seeds/3/", {"sort": "-score"}).content.decode()
    # By score, descending: 7, 4, 3, 1, 0, then the failed seeds (no score) in seed order.
    assert f'href="/jobs/{job.id}/seeds/4/?sort=-score" rel="prev"' in page
    assert f'href="/jobs/{job.id}/seeds/1/?sort=-score" rel="next"' in page
    assert re.search(rf'href="/jobs/{job.id}/seeds/2/\?sort=-score" data-next-failure', page)
    assert "(3 of 8)" in page

    page = web.get(f"/jobs/{job.id}/seeds/2/", {"failures": "1"}).content.decode()
    assert f'href="/jobs/{job.id}/seeds/5/?failures=1" rel="next"' in page
    assert 'rel="prev"' not in page
    assert f'href="/jobs/{job.id}/seeds/5/?failures=1" data-next-failure' in page
    # The table link goes back to the same rows.
    assert f'href="/jobs/{job.id}/?failures=1#seeds"' in page


def test_table_links_carry_the_filter_to_the_seed_pages(web, job):
    html = web.get(f"/jobs/{job.id}/", {"failures": "1", "page": "1"}).content.decode()
    assert f'href="/jobs/{job.id}/seeds/2/?failures=1"' in html


def test_each_call_has_its_raw_exchange_redacted_with_copy_buttons(web, job):
    call = LLMCall.objects.filter(attempt__seed_run__job=job, attempt__seed_run__seed=1).first()
    call.request["temperature"] = 0.25
    call.request["messages"][1]["content"] += f" key {job_rows.TASK_APP_KEY}"
    call.save()
    html = web.get(f"/jobs/{job.id}/seeds/1/").content.decode()
    raw = re.findall(r'<details class="raw-exchange".*?</details>', html, flags=re.S)
    assert len(raw) == 2
    assert "&quot;temperature&quot;: 0.25" in raw[0] and "&quot;tools&quot;" in raw[0]
    assert "&quot;finish_reason&quot;: &quot;tool_calls&quot;" in raw[0]
    assert raw[0].count("data-copy-text") == 2
    assert job_rows.TASK_APP_KEY not in html


def test_the_job_page_breaks_calls_down_by_model_with_tokens_by_kind(web, job):
    html = web.get(f"/jobs/{job.id}/").content.decode()
    table = re.search(r'<table class="models">.*?</table>', html, flags=re.S).group(0)
    row = re.search(r'<tr data-model="([^"]+)" data-kind="policy">(.*?)</tr>', table, flags=re.S)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(2))  # the kind's badge left out
    # 8 seeds x 2 calls; prompts 120 + 170, completions 30 + 12 of which 8 reasoning.
    assert row.group(1) == "gpt-4o-mini-2024-07-18"
    assert 'data-total="policy"' not in table  # one row: no total to add
    assert cells[1:6] == ["16", "2,320", "0", "272", "64"]
    assert cells[6] == "$0.003200"


def test_pending_seeds_show_a_dash_not_zero_tokens_and_no_cost(web, django_user_model):
    job = job_rows.job_make(owner=django_user_model.objects.get(username="alice"), seeds=[0, 1])
    html = web.get(f"/jobs/{job.id}/").content.decode()
    row = re.search(r'<tr class="seed-pending" data-seed="0">(.*?)</tr>', html, flags=re.S)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
    assert cells[:4] == ["—"] * 4 and "$0" not in row.group(1)  # score, latency, tokens, cost
    seed = web.get(f"/jobs/{job.id}/seeds/0/").content.decode()
    assert '<span class="label">Tokens</span><span class="value">—</span>' in seed
    assert "$0" not in seed


def test_the_plain_table_walks_seed_order_and_the_next_failure_after_this_seed(web, job):
    page = web.get(f"/jobs/{job.id}/seeds/3/").content.decode()
    assert f'href="/jobs/{job.id}/seeds/2/" rel="prev"' in page
    assert f'href="/jobs/{job.id}/seeds/4/" rel="next"' in page
    assert f'href="/jobs/{job.id}/seeds/5/" data-next-failure' in page
    last = web.get(f"/jobs/{job.id}/seeds/7/").content.decode()
    assert 'rel="next"' not in last and "data-next-failure" not in last
