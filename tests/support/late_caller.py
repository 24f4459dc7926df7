"""A task app that calls its own inference URL right after answering its rollout: the fault
whose window the push of ended attempts bounds (tests/traces/test_revocation_push.py,
bench/bench_revocation.py).

Per rollout it first makes one chat completion through each of `bases` (the web processes: the
URL's path on each), so every process holds the token in its cache and watches the attempt, as
in a real rollout. Then it answers, and from the moment its answer is sent (`answered_at`,
before the worker can know that the attempt is over) it calls the same URL again, one call
after another round-robin over `bases`, until every process has refused one or `max_late`
calls were made. Each late call names its rollout in its message (`late <run id> <n>`).

A rollout's window runs from its answer to the last late call the interceptor let through:
the `started_at` of that call's record, taken as the interceptor decides, before the token is
looked at (`admitted`). Its late calls that reached the provider are counted from the fake
provider's records, as is the window to the last one's arrival there, which adds the time to
forward the call (on a loaded machine, tens of ms in the test process) to the window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.servers import wait_until
from traces.models import LLMCall

CALLER_KEY = "sk-late-caller"


def _chat(text: str) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}


@dataclass
class Window:
    """One rollout's late calls: made, and reached the provider; the window from its answer
    to the last the interceptor let through, and to the last one's arrival at the provider
    (0 when none got through)."""

    made: int
    through: int
    window_s: float
    arrival_s: float


@dataclass
class LateCaller:
    bases: list[str]
    max_late: int = 200
    # run id -> (time.time(), time.monotonic()) when its answer was sent.
    answered_at: dict[str, tuple[float, float]] = field(default_factory=dict)
    late_statuses: dict[str, list[int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # The rollouts whose late calls are over.
    finished: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/rollout", self._rollout, methods=["POST"]),
            ]
        )
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
            self._client = httpx.AsyncClient(timeout=30, limits=limits)
        return self._client

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"healthy": True})

    async def _rollout(self, request: Request) -> JSONResponse:
        body = await request.json()
        run_id = body["run_id"]
        path = urlsplit(body["policy"]["config"]["inference_url"]).path
        for base in self.bases:  # the token cached and watched in every web process
            answer = await self.client().post(
                f"{base}{path}/chat/completions", json=_chat(f"during {run_id}"),
                headers={"Authorization": f"Bearer {CALLER_KEY}"},
            )  # fmt: skip
            if answer.status_code != 200:
                self.errors.append(f"{run_id}: {answer.status_code} during the rollout")
        answer = {"run_id": run_id, "metrics": {"outcome_reward": 1.0}, "trace": None}
        # The background task starts once the answer's last byte has been handed to the socket.
        return JSONResponse(answer, background=BackgroundTask(self._after, run_id, path))

    async def _after(self, run_id: str, path: str) -> None:
        self.answered_at[run_id] = (time.time(), time.monotonic())
        try:
            await self._call_until_refused(run_id, path)
        finally:
            self.finished.add(run_id)

    async def _call_until_refused(self, run_id: str, path: str) -> None:
        statuses = self.late_statuses.setdefault(run_id, [])
        refused: set[str] = set()
        for n in range(self.max_late):
            base = self.bases[n % len(self.bases)]
            try:
                answer = await self.client().post(
                    f"{base}{path}/chat/completions", json=_chat(f"late {run_id} {n}"),
                    headers={"Authorization": f"Bearer {CALLER_KEY}"},
                )  # fmt: skip
            except httpx.HTTPError as exc:
                self.errors.append(f"{run_id}: {exc!r}")
                return
            statuses.append(answer.status_code)
            if answer.status_code == 410:
                refused.add(base)
                if len(refused) == len(self.bases):
                    return

    def windows(
        self, received: list[dict[str, Any]], admitted: dict[str, list[float]]
    ) -> dict[str, Window]:
        """Per rollout answered, what its late calls did: from the provider's `received` and
        the times the interceptor let them through (`admitted`)."""
        arrived: dict[str, list[float]] = {}
        for call in received:
            run_id = _late_run_id((call.get("body") or {}).get("messages"))
            if run_id:
                arrived.setdefault(run_id, []).append(call["at"])
        out = {}
        for run_id, (wall, mono) in self.answered_at.items():
            let, got = admitted.get(run_id, []), arrived.get(run_id, [])
            out[run_id] = Window(
                made=len(self.late_statuses.get(run_id, [])),
                through=len(got),
                window_s=max(let) - wall if let else 0.0,
                arrival_s=max(got) - mono if got else 0.0,
            )
        return out


def admitted(rows: Callable[[], Iterable[tuple]], received: list[dict[str, Any]]):
    """Run id -> when the interceptor let each of its late calls through (epoch seconds), from
    the job's call records (`rows()`: (run id, request, started_at) of its calls answered
    200), once those of every late call the provider `received` are saved."""
    late = sum(1 for call in received if _late_run_id((call.get("body") or {}).get("messages")))

    def saved() -> dict[str, list[float]] | None:
        found: dict[str, list[float]] = {}
        for run_id, request, started_at in rows():
            if _late_run_id(request.get("messages")) == run_id:
                found.setdefault(run_id, []).append(started_at.timestamp())
        return found if sum(map(len, found.values())) >= late else None

    if late == 0:  # none got through: nothing to wait for
        return {}
    return wait_until(saved, timeout=30, what="the late calls' records")


def orm_rows(job_id: str) -> Callable[[], Iterable[tuple]]:
    """`admitted`'s rows of a job, read through Django's database."""
    return lambda: LLMCall.objects.filter(
        attempt__seed_run__job_id=job_id, http_status=200
    ).values_list("attempt__run_id", "request", "started_at")


def _late_run_id(messages: Any) -> str | None:
    text = (messages or [{}])[-1].get("content") if isinstance(messages, list) else None
    return text.split()[1] if isinstance(text, str) and text.startswith("late ") else None


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
