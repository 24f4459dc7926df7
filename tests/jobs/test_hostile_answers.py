"""A task app's answer the database cannot hold (NaN, NUL characters, nesting beyond any
parser, more bytes than a worker should read) ends its seed at once with a clear error, or,
when only the trace is at fault, keeps the score and says why the trace was not stored. The
job never waits for a lease to expire."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.jobs import FAST, job_create, job_wait, seeds_of
from tests.support.servers import serve_asgi

pytestmark = pytest.mark.worker

LIMIT = 100_000
GOOD = '{"metrics": {"outcome_reward": 0.5}, "trace": {"steps": 1}}'
ANSWERS = {
    0: GOOD,
    1: '{"metrics": {"outcome_reward": 0.5, "aux": NaN}}',
    2: '{"metrics": {"outcome_reward": 0.5, "note": "a\\u0000b"}}',
    3: '{"metrics": {"outcome_reward": 0.5}, "trace": ' + "[" * 10_000 + "]" * 10_000 + "}",
    4: '{"metrics": {"outcome_reward": 0.25}, "trace": {"loss": Infinity}}',
    5: '{"metrics": {"outcome_reward": 0.5}, "trace": "' + "x" * (2 * LIMIT) + '"}',
    6: '{"metrics": {"outcome_reward": 0.75}, "trace": ' + "[" * 300 + "]" * 300 + "}",
    # Beyond 64 bits: read whole (orjson alone would make it a float), then refused.
    7: '{"metrics": {"outcome_reward": 0.5, "id": 18446744073709551616}}',
    8: '{"metrics": {"outcome_reward": 0.125}, "trace": {"id": -9223372036854775809}}',
}


def hostile_app() -> Starlette:
    async def health(request: Request) -> Response:
        return Response("{}", media_type="application/json")

    async def rollout(request: Request) -> Response:
        seed = (await request.json())["env"]["seed"]
        return Response(ANSWERS[seed], media_type="application/json")

    return Starlette(
        routes=[Route("/health", health), Route("/rollout", rollout, methods=["POST"])]
    )


def test_unstorable_answers_fail_their_seed_at_once_and_a_bad_trace_is_set_aside(
    client_alice, worker_factory
):
    with serve_asgi(hostile_app()) as url:
        worker_factory(EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES=str(LIMIT), EVALHUB_LEASE_S="60",
                       **FAST)  # fmt: skip
        job_id = job_create(client_alice, url, seeds=list(ANSWERS), max_concurrent=7)
        job = job_wait(job_id, timeout=40)  # a crashed rollout would hold its seed for 60 s
    assert job.status == "completed"
    runs = seeds_of(job_id)
    assert (runs[0].status, runs[0].score) == ("succeeded", 0.5)
    failed = {s: runs[s].error for s in (1, 2, 3, 5, 7)}
    assert all(runs[s].status == "failed" and runs[s].attempts == 1 for s in failed), failed
    assert "metrics has nan" in failed[1]
    assert "metrics has a NUL character" in failed[2]
    assert "nested too deeply" in failed[3]
    assert f"more than {LIMIT} bytes (EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES)" in failed[5]
    assert "metrics has an integer beyond 64 bits" in failed[7]
    for seed, score in ((4, 0.25), (6, 0.75), (8, 0.125)):
        assert (runs[seed].status, runs[seed].score) == ("succeeded", score)
    assert "inf" in runs[4].task_trace["trace_not_stored"]
    assert "nested deeper than" in runs[6].task_trace["trace_not_stored"]
    assert "integer beyond 64 bits" in runs[8].task_trace["trace_not_stored"]
