"""A worker's memory is bounded by its answer budget (EVALHUB_WORKER_ANSWER_BUDGET_BYTES), not
by `max_concurrent` times the size of an answer: 30 valid answers of 15 MiB arriving at once
are read a few at a time (the others wait, their sockets unread), every seed's result is
right, and the worker's peak RSS stays under the budget plus its baseline."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from jobs.models import SeedRun
from tests.support.jobs import FAST, job_create, job_wait
from tests.support.servers import serve_asgi, wait_until

pytestmark = pytest.mark.worker

SEEDS = 30
ANSWER_BYTES = 15 * 2**20
BUDGET = 256 * 2**20
# What the worker holds besides its answers in flight: its peak after start-up (measured in the
# test), plus one answer being decoded per runner thread (its decoded form, about twice its
# bytes, and its text: never charged, they live only while a thread parses it) and the
# allocator's slack. Measured over the start-up peak with a budget of 256 MiB: 247 MiB on
# SQLite, 306 MiB on PostgreSQL; 756 MiB on SQLite without the budget, 485 MiB on PostgreSQL
# when a batch of results went as one statement (jobs.bulk_values.STATEMENT_BYTES).
SLACK = 120 * 2**20
WORDS = ("alpha", "beta", "gamma", "delta", "tool", "observation", "reward", "the", "state")


def trace_body(size: int) -> tuple[bytes, int]:
    """A trace of about `size` bytes as task apps send them (messages with tool calls, steps
    with small observations) and its message count."""
    rnd = random.Random(7)
    messages, steps, total = [], [], 0
    while total < size:
        text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, 200)))
        message = {"role": rnd.choice(["user", "assistant", "tool"]), "content": text}
        if rnd.random() < 0.3:
            arguments = json.dumps({"action": rnd.randint(0, 9)})
            message["tool_calls"] = [{"id": f"call_{total}", "type": "function",
                                      "function": {"name": "step", "arguments": arguments}}]  # fmt: skip
        messages.append(message)
        steps.append({"t": len(steps), "reward": rnd.random(), "obs": [rnd.randint(0, 255)] * 16})
        total += len(text) + 200
    return json.dumps({"messages": messages, "steps": steps}).encode(), len(messages)


def big_answers_app(body: bytes):
    """Answers every rollout once SEEDS of them have arrived (or 20 s went by), all at once:
    even seeds with a Content-Length, odd ones streamed in chunks without one."""
    arrived = {"n": 0}
    all_in = asyncio.Event()

    async def health(request: Request) -> Response:
        return Response("{}", media_type="application/json")

    async def rollout(request: Request) -> Response:
        seed = (await request.json())["env"]["seed"]
        arrived["n"] += 1
        if arrived["n"] >= SEEDS:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), timeout=20)
        head = b'{"metrics": {"outcome_reward": %.2f}, "trace": {"seed": %d, "body": ' % (
            seed / 100,
            seed,
        )
        answer = head + body + b"}}"
        if seed % 2 == 0:
            return Response(answer, media_type="application/json")

        async def chunks():
            for start in range(0, len(answer), 2**20):
                yield answer[start : start + 2**20]

        return StreamingResponse(chunks(), media_type="application/json")

    app = Starlette(routes=[Route("/health", health), Route("/rollout", rollout, methods=["POST"])])
    return app, arrived


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def test_thirty_big_answers_at_once_stay_within_the_workers_answer_budget(
    client_alice, worker_factory
):
    body, message_count = trace_body(ANSWER_BYTES)
    app, arrived = big_answers_app(body)
    with serve_asgi(app) as url:
        worker = worker_factory(
            EVALHUB_WORKER_ANSWER_BUDGET_BYTES=str(BUDGET),
            EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES=str(16 * 2**20),
            EVALHUB_LEASE_S="60",
            # The zip's members of finished seeds, built in the worker as the job runs from
            # the stored traces, are not answers in flight: measured apart (README, "Sizes").
            EVALHUB_TRACES_ZIP_AFTER_S="600",
            **FAST,
        )
        pid = worker.proc.pid
        baseline_kib = vm_kib(pid, "VmHWM")
        samples = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.2):
                samples.append(vm_kib(pid, "VmRSS"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        job_id = job_create(
            client_alice, url, seeds=list(range(SEEDS)), max_concurrent=SEEDS, timeout=120
        )
        job = job_wait(job_id, timeout=300)
        wait_until(lambda: arrived["n"] >= SEEDS, timeout=5, what="every rollout")
        peak_kib, after_kib = vm_kib(pid, "VmHWM"), vm_kib(pid, "VmRSS")
        stop.set()
        sampler.join()
    print(
        f"worker RSS: baseline {baseline_kib / 1024:.0f} MiB, peak {peak_kib / 1024:.0f} MiB,"
        f" after {after_kib / 1024:.0f} MiB (budget {BUDGET / 2**20:.0f} MiB)"
    )
    assert job.status == "completed", job.error
    runs = SeedRun.objects.filter(job_id=job_id).order_by("seed")
    rows = list(runs.values_list("seed", "status", "score", "attempts", "task_trace__seed"))
    assert rows == [(s, "succeeded", s / 100, 1, s) for s in range(SEEDS)]
    # Whole, for an answer of each kind (sized, streamed): decoding all 30 took 12 s.
    for seed in (0, 1, SEEDS - 1):
        trace = runs.get(seed=seed).task_trace
        assert len(trace["body"]["messages"]) == message_count
        del trace
    assert peak_kib * 1024 <= baseline_kib * 1024 + BUDGET + SLACK, (peak_kib, baseline_kib)
