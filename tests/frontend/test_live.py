"""What the pages' live updates read: the jobs list's figures by name, and a job's event stream
signed by the dashboard's session (the API's keys still work; nothing else does)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from jobs.events import EventType, job_event_append
from jobs.models import SeedRun
from tests.frontend import job_rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="x" * 12)


def streamed(response) -> str:
    """The whole stream (it ends: the job is over). The view is async: so is its content."""

    async def collect() -> str:
        return "".join([c.decode() async for c in response.streaming_content])

    return async_to_sync(collect)()


def test_the_jobs_list_json_carries_each_figure_as_shown(alice):
    web = Client()
    web.force_login(alice)
    done = job_rows.job_make(owner=alice, seeds=[0, 1])
    job_rows.job_run_all(job=done, scores={0: 0.25, 1: 0.75})
    waiting = job_rows.job_make(owner=alice, seeds=[0])
    data = web.get("/jobs/progress.json", {"ids": f"{done.id},{waiting.id}"}).json()["jobs"]
    assert data[done.id]["figures"]["mean_score"] == "0.500"
    assert data[done.id]["figures"]["tokens"] == "664"
    assert data[done.id]["figures"]["cost"] == "$0.000800"
    # Not started: nothing spent yet, and the page says so with a dash rather than 0 and $0.
    assert data[waiting.id]["figures"] == {
        "mean_score": "—",
        "cost": "—",
        "tokens": "—",
        "duration": "—",
    }
    page = web.get("/").content.decode()
    assert 'data-event-seq="1"' in page  # the created event: the page listens after it
    assert (
        'title="Mean score over every finished sample (succeeded or failed), a failed sample'
        in page
    )


def test_the_event_stream_takes_the_session_of_the_jobs_owner_only(alice, django_user_model):
    job = job_rows.job_make(owner=alice, seeds=[0])
    job_rows.job_run_all(job=job)
    run = SeedRun.objects.get(job=job)
    job_event_append(job_id=job.id, type=EventType.SEED_COMPLETED, data={"seed": run.seed})
    url = f"/api/eval/jobs/{job.id}/events/stream"

    assert Client().get(url).status_code == 401
    other = Client()
    other.force_login(django_user_model.objects.create_user(username="bob", password="y" * 12))
    assert other.get(url).status_code == 404

    web = Client()
    web.force_login(alice)
    response = web.get(url, {"since_seq": "1"})
    assert response.status_code == 200
    body = streamed(response)
    assert f"event: {EventType.SEED_COMPLETED}" in body and "event: sse.stream.ended" in body
    first = body.split("data: ", 1)[1].split("\n", 1)[0]
    assert json.loads(first)["seq"] == 2
