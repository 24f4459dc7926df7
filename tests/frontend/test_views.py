"""The dashboard's pages through Django's test client: sign-in, CSRF, ownership, secrets."""

from __future__ import annotations

import io
import re
import zipfile
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from evalhub.errors import server_error
from jobs.models import ApiKey, EvalJob, JobStatus, SeedRun, SeedStatus
from tests.frontend import job_rows

PASSWORD = "pw-for-tests-123"


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password=PASSWORD)


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user(username="bob", password=PASSWORD)


@pytest.fixture
def web(alice) -> Client:
    """Alice's browser: signed in, CSRF enforced as in production."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


def csrf_token(client: Client, path: str) -> str:
    html = client.get(path).content.decode()
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def finished_job(owner, seeds=(0, 1, 2), scores=None) -> EvalJob:
    job = job_rows.job_make(owner=owner, seeds=list(seeds))
    return job_rows.job_run_all(job=job, scores=scores)


@pytest.mark.parametrize("path", ["/", "/keys/", "/jobs/eval-x/", "/jobs/eval-x/progress.json"])
def test_pages_send_a_signed_out_visitor_to_sign_in(client, db, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/login/?next={path}")


def test_sign_in_with_csrf_then_sign_out(alice):
    client = Client(enforce_csrf_checks=True)
    token = csrf_token(client, "/login/")
    response = client.post(
        "/login/", {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    token = csrf_token(client, "/")
    assert client.post("/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302


def test_a_wrong_password_is_refused(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"do not match" in response.content
    assert client.get("/").status_code == 302


def test_forms_without_a_csrf_token_are_refused(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0])
    assert web.post("/keys/", {"name": "x"}).status_code == 403
    assert web.post(f"/jobs/{job.id}/cancel").status_code == 403
    assert not ApiKey.objects.exists()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING


def test_a_new_key_is_shown_once_then_listed_by_prefix_only(web, alice):
    token = csrf_token(web, "/keys/")
    created = web.post("/keys/", {"name": "laptop", "csrfmiddlewaretoken": token})
    assert created.status_code == 200
    assert created["Cache-Control"].startswith("max-age=0")
    plaintext = re.search(r'value="(ehk_[^"]+)"', created.content.decode()).group(1)
    key = ApiKey.objects.get(user=alice)
    assert plaintext.startswith(f"ehk_{key.prefix}_")

    listed = web.get("/keys/").content.decode()
    assert plaintext not in listed
    assert f"{key.prefix}…" in listed and "laptop" in listed and "never" in listed


def test_revoke_a_key_and_never_someone_elses(web, alice, bob):
    from jobs.apikeys import api_key_create

    mine, _ = api_key_create(user=alice, name="mine")
    theirs, _ = api_key_create(user=bob, name="theirs")
    token = csrf_token(web, "/keys/")
    assert (
        web.post(f"/keys/{theirs.prefix}/revoke", {"csrfmiddlewaretoken": token}).status_code == 404
    )
    assert (
        web.post(f"/keys/{mine.prefix}/revoke", {"csrfmiddlewaretoken": token}).status_code == 302
    )
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None and theirs.revoked_at is None
    assert theirs.prefix not in web.get("/keys/").content.decode()


def test_jobs_list_is_newest_first_filtered_and_paginated(web, alice, bob):
    jobs = [job_rows.job_make(owner=alice, seeds=[0]) for _ in range(27)]
    base = timezone.now()
    for i, job in enumerate(jobs):  # distinct times: ids are random, so ties would shuffle
        EvalJob.objects.filter(pk=job.pk).update(created_at=base + timedelta(seconds=i))
    job_rows.job_finish(job=jobs[0], status=JobStatus.FAILED)
    job_rows.job_make(owner=bob, seeds=[0])

    first = web.get("/").content.decode()
    ids = re.findall(r'data-job-id="([^"]+)"', first)
    assert ids == [j.id for j in reversed(jobs)][:25]
    assert "Page 1 of 2" in first
    second = web.get("/?page=2").content.decode()
    assert re.findall(r'data-job-id="([^"]+)"', second) == [jobs[1].id, jobs[0].id]

    failed = web.get("/?status=failed").content.decode()
    assert re.findall(r'data-job-id="([^"]+)"', failed) == [jobs[0].id]


def test_jobs_list_shows_mean_score_cost_tokens_and_an_unknown_cost_as_unknown(web, alice):
    job = finished_job(alice, scores={0: 0.0, 1: 0.5, 2: 1.0})
    unpriced = job_rows.job_make(owner=alice, seeds=[0])
    job_rows.attempt_record(seed_run=SeedRun.objects.get(job=unpriced), cost=None)
    html = web.get("/").content.decode()
    row = html[html.index(f'data-job-id="{job.id}"') :]
    assert "0.500" in row[:3000] and "$0.001200" in row[:3000] and "996" in row[:3000]
    unpriced_row = html[html.index(f'data-job-id="{unpriced.id}"') :][:3000]
    assert "unknown" in unpriced_row and "$0<" not in unpriced_row


def test_another_accounts_job_is_not_found_on_every_page(web, bob):
    job = finished_job(bob)
    for path in [
        f"/jobs/{job.id}/",
        f"/jobs/{job.id}/progress.json",
        f"/jobs/{job.id}/seeds/0/",
        f"/jobs/{job.id}/traces.zip",
    ]:
        assert web.get(path).status_code == 404, path
    token = csrf_token(web, "/")
    assert web.post(f"/jobs/{job.id}/cancel", {"csrfmiddlewaretoken": token}).status_code == 404
    progress = web.get(f"/jobs/progress.json?ids={job.id}").json()
    assert progress == {"jobs": {}}


def test_job_page_shows_the_task_app_key_only_as_set(web, alice):
    job = finished_job(alice)
    html = web.get(f"/jobs/{job.id}/").content.decode()
    assert job_rows.TASK_APP_KEY not in html
    assert job.task_app_api_key_encrypted not in html
    assert re.search(r'data-secret="task_app_api_key">.*?set</span>', html)
    assert "gpt-4o-mini" in html


def test_job_page_summary_and_charts(web, alice):
    job = finished_job(alice, seeds=(0, 1, 2, 3), scores={0: 0.0, 1: 0.5, 2: 1.0, 3: 1.0})
    html = web.get(f"/jobs/{job.id}/").content.decode()
    assert "0.625" in html  # mean score
    assert "4 / 0" in html  # succeeded / failed
    assert "$0.001600" in html
    assert html.count('<svg class="chart"') == 2
    assert "3 seeds scored" not in html and "2 seeds scored 0.9 to 1" in html


def test_seed_table_filters_failures_and_scores_and_sorts(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0, 1, 2, 3])
    job_rows.job_start(job=job)
    runs = list(SeedRun.objects.filter(job=job).order_by("seed"))
    for run, score in zip(runs[:3], [0.9, 0.1, 0.5], strict=True):
        job_rows.seed_complete(seed_run=run, score=score)
    job_rows.seed_complete(seed_run=runs[3], error="boom")

    def seeds(query: str) -> list[str]:
        html = web.get(f"/jobs/{job.id}/?{query}").content.decode()
        return re.findall(r'<tr class="seed-\w+" data-seed="(-?\d+)"', html)

    assert seeds("") == ["0", "1", "2", "3"]
    assert seeds("failures=1") == ["3"]
    assert seeds("min_score=0.5") == ["0", "2"]
    assert seeds("max_score=0.5") == ["1", "2"]
    assert seeds("sort=-score") == ["0", "2", "1", "3"]  # no score sorts last
    assert seeds("sort=score") == ["1", "2", "0", "3"]
    assert seeds("sort=nonsense") == ["0", "1", "2", "3"]


def test_progress_json_counts_the_seeds(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0, 1, 2, 3])
    job_rows.job_start(job=job)
    runs = list(SeedRun.objects.filter(job=job).order_by("seed"))
    job_rows.seed_complete(seed_run=runs[0])
    job_rows.seed_complete(seed_run=runs[1], error="boom")
    SeedRun.objects.filter(pk=runs[2].pk).update(status=SeedStatus.RUNNING)
    body = web.get(f"/jobs/{job.id}/progress.json").json()
    assert body["status"] == "running" and body["terminal"] is False
    assert (body["completed"], body["total"], body["failed"], body["running"]) == (2, 4, 1, 1)
    assert (body["percent"], body["percent_succeeded"], body["percent_failed"]) == (50, 25, 25)
    listed = web.get(f"/jobs/progress.json?ids={job.id}").json()["jobs"][job.id]
    assert listed["completed"] == 2 and listed["status"] == "running"


def test_cancel_stops_the_job_and_its_pending_seeds(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0, 1])
    token = csrf_token(web, f"/jobs/{job.id}/")
    response = web.post(f"/jobs/{job.id}/cancel", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.id}/"
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert set(SeedRun.objects.filter(job=job).values_list("status", flat=True)) == {"cancelled"}
    assert "Cancel job" not in web.get(f"/jobs/{job.id}/").content.decode()


def test_traces_zip_downloads_with_the_session(web, alice):
    job = finished_job(alice)
    response = web.get(f"/jobs/{job.id}/traces.zip")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    body = b"".join(response.streaming_content) if response.streaming else response.content
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        assert any(job.id in zf.read(name).decode() for name in zf.namelist())


def test_seed_page_shows_the_conversation_and_each_calls_figures(web, alice):
    job = finished_job(alice, seeds=(-3, 5))
    html = web.get(f"/jobs/{job.id}/seeds/-3/").content.decode()
    assert job_rows.SYSTEM in html and "Seed -3: what is 17 * 23?" in html
    # The reasoning is folded: inside a <details> that is not open.
    assert re.search(r'<details class="reasoning">\s*<summary>Reasoning', html)
    assert job_rows.REASONING in html
    assert "&quot;a&quot;: 17" in html and "multiply" in html
    assert "tool · multiply" in html  # the tool result names its tool
    assert "17 * 23 = 391" in html
    assert "gpt-4o-mini-2024-07-18" in html and "TTFT 181 ms" in html and "120 + 30 tokens" in html
    # The history each call repeats is shown once (the raw exchanges aside, which are whole).
    conversation = re.sub(r'<details class="raw-exchange".*?</details>', "", html, flags=re.S)
    assert conversation.count(job_rows.SYSTEM) == 1
    assert "&quot;outcome_reward&quot;: 1.0" in html and "&quot;observation&quot;" in html


def test_seed_page_shows_every_attempt_of_a_retried_seed(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0])
    run = SeedRun.objects.get(job=job)
    job_rows.attempt_record(seed_run=run, number=1, error="task app answered 502")
    job_rows.attempt_record(seed_run=run, number=2)
    html = web.get(f"/jobs/{job.id}/seeds/0/").content.decode()
    assert 'id="attempt-1"' in html and 'id="attempt-2"' in html
    assert "task app answered 502" in html


def test_seed_page_hides_the_task_app_key_if_the_task_app_echoed_it(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0])
    SeedRun.objects.filter(job=job).update(
        task_trace={"headers": {"X-API-Key": job_rows.TASK_APP_KEY}}
    )
    html = web.get(f"/jobs/{job.id}/seeds/0/").content.decode()
    assert job_rows.TASK_APP_KEY not in html and "&lt;redacted&gt;" in html


def test_seed_page_links_to_the_previous_and_next_seeds(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[-2, 5, 9])
    html = web.get(f"/jobs/{job.id}/seeds/5/").content.decode()
    assert f'href="/jobs/{job.id}/seeds/-2/" rel="prev"' in html
    assert f'href="/jobs/{job.id}/seeds/9/" rel="next"' in html
    first = web.get(f"/jobs/{job.id}/seeds/-2/").content.decode()
    assert 'rel="prev"' not in first


def test_an_unknown_seed_is_not_found(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0])
    assert web.get(f"/jobs/{job.id}/seeds/7/").status_code == 404


def test_job_page_shows_the_verifier_config_and_seed_page_the_outcome_objectives(web, alice):
    job = finished_job(alice, seeds=(1, 2))
    EvalJob.objects.filter(pk=job.pk).update(
        verifier_config={"enabled": True, "reward_source": "fused", "backend_model": "judge-1"}
    )
    SeedRun.objects.filter(job=job, seed=1).update(
        metrics={"outcome_reward": 0.5, "outcome_objectives": {"reward": 0.5, "brevity": 0.25}}
    )
    html = web.get(f"/jobs/{job.id}/").content.decode()
    assert "reward from fused · enabled · judge-1" in html
    seed_html = web.get(f"/jobs/{job.id}/seeds/1/").content.decode()
    assert re.search(r"<dt>brevity</dt><dd>0\.25\d*</dd>", seed_html), seed_html
    assert "Outcome objectives" not in web.get(f"/jobs/{job.id}/seeds/2/").content.decode()


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("get", "/?q=a%00b", None),
        ("get", "/?tag=a%00b", None),
        ("get", "/jobs/progress.json?ids=eval-a%00b", None),
        ("get", "/jobs/{job}/?q=a%00b", None),
        ("get", "/jobs/{job}/?error=a%00b", None),
        ("get", "/jobs/{job}/seeds/0/?q=a%00b", None),
        ("get", "/jobs/{job}/seeds/0/?error=a%00b", None),
        ("get", "/compare/?base={job}&candidate=eval-a%00b", None),
        ("get", "/compare/?pick={job}&pick=eval-a%00b", None),
        ("post", "/keys/", {"name": "a\x00b"}),
        ("post", "/keys/ehk_a%00b/revoke", {}),
    ],
)
def test_a_nul_anywhere_a_page_reads_is_a_400_or_404_never_a_500(web, alice, method, path, data):
    """PostgreSQL refuses NUL characters in text, even to compare them."""
    job = finished_job(alice, seeds=(0,))
    client = Client()  # CSRF aside: the forms' own tests check it
    client.force_login(alice)
    url = path.format(job=job.id)
    keys = ApiKey.objects.count()
    response = client.post(url, data) if method == "post" else client.get(url)
    assert response.status_code in (200, 302, 400, 404), (url, response.status_code)
    assert ApiKey.objects.count() == keys


def test_a_page_that_is_not_there_says_why_in_the_dashboard(web):
    missing = web.get("/compare/?base=eval-0")  # a view's reason
    assert missing.status_code == 404
    html = missing.content.decode()
    assert "Pick two jobs to compare." in html and 'href="/api/docs"' in html  # the nav
    nowhere = web.get("/no/such/page/")  # the resolver's: its routes are not listed
    assert nowhere.status_code == 404
    assert "There is no page at this address." in nowhere.content.decode()
    assert "admin/" not in nowhere.content.decode()
    nul = web.get("/jobs/eval-a%00b/")  # refused before any view, answered the same way
    assert nul.status_code == 404 and "There is no page at this address." in nul.content.decode()


def test_an_api_route_that_is_not_there_is_json(client, db):
    for path in ("/api/no-such-route", "/api/eval/jobs/x/no-such-part"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json() == {"error": "not_found", "detail": "No such route."}


def test_a_failed_api_request_is_answered_json_and_a_page_djangos_plain_500(rf):
    api = server_error(rf.get("/api/eval/jobs"))
    assert api.status_code == 500 and api["Content-Type"] == "application/json"
    assert b'"error": "server_error"' in api.content
    page = server_error(rf.get("/jobs/x/"))
    assert page.status_code == 500 and b"Server Error" in page.content
