"""GET /api/eval/jobs/{id}/seeds/{seed} written call by call: the same value the document
always had, redacted the same way, and a sample of thousands of calls whole and in order."""

from __future__ import annotations

import json

import httpx
import pytest
from django.contrib.auth import get_user_model
from rest_framework.renderers import JSONRenderer

from jobs.models import SeedRun
from tests.frontend import job_rows
from tests.support.big_sample import big_sample_make
from tests.support.trace_rows import TASK_APP_BEARER, TASK_APP_KEY, make_traced_job
from traces.redaction import job_redactor
from traces.zip.documents import seed_trace
from traces.zip.seed_stream import seed_trace_chunks

pytestmark = pytest.mark.django_db
JOBS = "/api/eval/jobs"


def as_rendered_before(job, seed_run) -> dict:
    """The answer as the API rendered it before it was streamed: the document built whole,
    through the API's JSON renderer."""
    row, document = seed_trace(job=job, seed_run=seed_run, redactor=job_redactor(job=job))
    body = {"job_id": job.id, "seed": seed_run.seed, "repeat": seed_run.repeat, "result": row,
            "trace": document}  # fmt: skip
    return json.loads(JSONRenderer().render(body))


def streamed(job, seed_run, **kwargs) -> tuple[list[bytes], dict]:
    pieces = list(
        seed_trace_chunks(job=job, seed_run=seed_run, redactor=job_redactor(job=job), **kwargs)
    )
    return pieces, json.loads(b"".join(pieces))


def test_streamed_answer_is_the_document_built_whole():
    traced = make_traced_job(username="alice", seeds=[3, -2], calls_per_seed=3)
    judged = SeedRun.objects.get(job=traced.job, seed=3)
    job_rows.judge_record(seed_run=judged, verdict=0.5, justification="Close enough.")
    for seed_run in SeedRun.objects.filter(job=traced.job):
        pieces, body = streamed(traced.job, seed_run, page_calls=2)  # pages end mid-attempt
        assert body == as_rendered_before(traced.job, seed_run)
        text = b"".join(pieces).decode()
        assert TASK_APP_KEY not in text and TASK_APP_BEARER not in text
        assert not any(token in text for token in traced.tokens)
    plain = streamed(traced.job, SeedRun.objects.get(job=traced.job, seed=-2))[1]
    assert plain["trace"]["verifier"] is None
    judged_body = streamed(traced.job, judged)[1]
    assert judged_body["trace"]["verifier"]["verifier_score"] == 0.5
    assert [c["kind"] for c in judged_body["trace"]["llm_calls"]].count("judge") == 1


def test_a_sample_of_thousands_of_calls_streams_whole_and_in_order():
    owner = get_user_model().objects.create_user(username="alice")
    seed_run = big_sample_make(owner=owner, calls=3000)
    pieces, body = streamed(seed_run.job, seed_run)
    assert len(pieces) >= 3000 // 200  # a piece a page of calls at most, not one piece
    calls = body["trace"]["llm_calls"]
    assert [c["seq"] for c in calls] == list(range(1, 3001))
    assert calls[-1]["response"]["tool_calls"][0]["id"] == "call_3000"
    assert body["trace"]["usage"]["num_llm_calls"] == 3000
    assert body["result"]["tokens"] == 3000 * 520
    assert body["trace"]["usage"]["total_tokens"] == 3000 * 520


def test_the_api_answers_a_big_sample_whole(client_alice):
    owner = get_user_model().objects.get(username="alice")
    seed_run = big_sample_make(owner=owner, calls=1200)
    response = client_alice.get(f"{JOBS}/{seed_run.job.id}/seeds/0")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    body = response.json()
    assert len(body["trace"]["llm_calls"]) == 1200
    assert body["result"]["num_llm_calls"] == 1200


def test_a_web_process_streams_a_big_sample(client_alice, web_server):
    """Under ASGI the answer goes out in pieces as it is written (no length known ahead)."""
    owner = get_user_model().objects.get(username="alice")
    seed_run = big_sample_make(owner=owner, calls=2000)
    headers = {"Authorization": f"Bearer {client_alice.api_key}"}
    url = f"{web_server}{JOBS}/{seed_run.job.id}/seeds/0"
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers
        body = json.loads(response.read())
    assert [c["seq"] for c in body["trace"]["llm_calls"]] == list(range(1, 2001))
