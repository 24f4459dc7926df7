"""The server-sent-events stream of a job's events, served by a real uvicorn process."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.support.jobs import FAST, job_create, job_wait
from tests.support.servers import serve_asgi
from tests.support.task_app import score_of, task_app_create

JOBS = "/api/eval/jobs"


def read_stream(url: str, key: str, **headers: str) -> list[dict]:
    """Every event of the stream until the server ends it."""
    events, current = [], {}
    with httpx.stream(
        "GET", url, headers={"Authorization": f"Bearer {key}", **headers}, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if "event" in current:
                    events.append(current)
                current = {}
            elif line.startswith(("id:", "event:", "data:")):
                name, _, value = line.partition(":")
                current[name] = value.strip()
    assert events[-1]["event"] == "sse.stream.ended" and "id" not in events[-1]
    assert json.loads(events[-1]["data"])["type"] == "sse.stream.ended"
    return [
        {"id": int(e["id"]), "event": e["event"], "data": json.loads(e["data"])}
        for e in events[:-1]
    ]


@pytest.mark.worker
def test_stream_follows_a_running_job_to_its_end_and_resumes_from_last_event_id(
    client_alice, worker_factory, web_server
):
    app, _ = task_app_create(delay_s=0.3)
    with serve_asgi(app) as task_url:
        worker_factory(**FAST)
        job_id = job_create(client_alice, task_url, seeds=[0, 1, 2], max_concurrent=1)
        url = f"{web_server}{JOBS}/{job_id}/events/stream"
        events = read_stream(url, client_alice.api_key)  # opened while the job runs
        job_wait(job_id)
    types = [e["event"] for e in events]
    assert types == ["eval.policy.job.created"] + ["eval.policy.seed.completed"] * 3 + [
        "eval.policy.job.completed"
    ]
    assert [e["id"] for e in events] == [1, 2, 3, 4, 5]
    seeds = {
        e["data"]["data"]["seed"]: e["data"]["data"]
        for e in events
        if "seed" in types[0] or e["event"].endswith("seed.completed")
    }
    assert {s: d["score"] for s, d in seeds.items()} == {s: score_of(s) for s in (0, 1, 2)}
    assert all(d["seed_status"] == "succeeded" and d["error"] is None for d in seeds.values())
    # No seed event says `status`: synth-ai 0.7's streamer stops at a terminal-looking one.
    assert not any("status" in d for d in seeds.values())
    assert sorted(d["completed"] for d in seeds.values()) == [1, 2, 3]
    assert {d["total"] for d in seeds.values()} == {3}
    done = events[-1]["data"]["data"]
    assert done["summary"]["num_successful"] == 3
    assert done["completed"] == done["total"] == 3
    assert done["mean_reward"] == pytest.approx(sum(score_of(s) for s in (0, 1, 2)) / 3)

    resumed = read_stream(url, client_alice.api_key, **{"Last-Event-ID": "3"})
    assert [e["id"] for e in resumed] == [4, 5]
    since = read_stream(f"{url}?since_seq=4", client_alice.api_key)
    assert [e["event"] for e in since] == ["eval.policy.job.completed"]


def test_stream_of_a_cancelled_job_ends_with_the_cancel_event(transactional_db, client_alice):
    # Committed: streams read events in a thread of their poller's (jobs/api/event_poller.py).
    job_id = client_alice.post(
        JOBS, {"task_app_url": "http://127.0.0.1:9", "seeds": [1]}, format="json"
    ).json()["job_id"]
    client_alice.post(f"{JOBS}/{job_id}/cancel")
    response = client_alice.get(f"{JOBS}/{job_id}/events/stream")
    assert response.status_code == 200
    from asgiref.sync import async_to_sync

    async def collect() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    body = async_to_sync(collect)().decode()
    assert "event: eval.policy.job.created" in body
    assert "event: eval.policy.job.cancelled" in body
    assert body.rstrip().split("\n")[-2] == "event: sse.stream.ended"


def test_stream_needs_a_key_and_hides_other_accounts_jobs(client_alice, client_bob):
    from rest_framework.test import APIClient

    job_id = client_alice.post(
        JOBS, {"task_app_url": "http://127.0.0.1:9", "seeds": [1]}, format="json"
    ).json()["job_id"]
    url = f"{JOBS}/{job_id}/events/stream"
    assert APIClient().get(url).status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer ehk_00000000_nope")
    assert wrong.get(url).status_code == 401
    response = client_bob.get(url)
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert response.json()["detail"] == "No such job."
    assert client_alice.get(f"{JOBS}/eval-x%00y/events/stream").status_code == 404
    assert client_alice.get(f"{url}?since_seq=x").status_code == 400
    assert client_alice.get(f"{url}?since_seq={2**31}").status_code == 400


def test_a_job_id_with_a_nul_is_404_not_500(client_alice):
    response = client_alice.get(f"{JOBS}/eval-x%00y/events/stream")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_streams_from_different_events_each_get_every_page_then_the_end(
    transactional_db, client_alice
):
    """More events than one read holds (event_poller.PAGE), two streams of the job from two
    places at once: each gets every event after its own, in order, once, then the end."""
    from asgiref.sync import async_to_sync

    from jobs.api import event_poller
    from jobs.events import EventType
    from jobs.models import JobEvent

    job_id = client_alice.post(
        JOBS, {"task_app_url": "http://127.0.0.1:9", "seeds": [1]}, format="json"
    ).json()["job_id"]
    count = event_poller.PAGE * 2 + 7
    JobEvent.objects.bulk_create(
        JobEvent(job_id=job_id, seq=seq, type=EventType.SEED_COMPLETED, data={"seed": seq})
        for seq in range(2, count + 2)
    )
    client_alice.post(f"{JOBS}/{job_id}/cancel")
    last = JobEvent.objects.filter(job_id=job_id).order_by("-seq").first().seq
    url = f"{JOBS}/{job_id}/events/stream"
    responses = [client_alice.get(url), client_alice.get(f"{url}?since_seq=600")]

    async def collect(response) -> str:
        return b"".join([chunk async for chunk in response.streaming_content]).decode()

    async def both() -> list[str]:
        return list(await asyncio.gather(*(collect(r) for r in responses)))

    for body, since in zip(async_to_sync(both)(), (0, 600), strict=True):
        ids = [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]
        assert ids == list(range(since + 1, last + 1))
        assert body.rstrip().split("\n")[-2] == "event: sse.stream.ended"
