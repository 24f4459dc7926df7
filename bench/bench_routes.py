"""Latency the interceptor adds on each of its newer routes (Responses, Anthropic Messages, text
completions, embeddings), against calling the same fake provider directly, in one run.

Starts the fake OpenAI and fake Anthropic providers and evalhub's web process (uvicorn, one
worker) as separate processes on loopback ports, with a fresh SQLite database in a temporary
directory. Rounds alternate direct/interceptor so drift hits both.

    .venv/bin/python bench/bench_routes.py [--calls 400] [--rounds 2] [--concurrency 1 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from bench_interceptor import (  # a sibling: run as bench/bench_routes.py
    collector_paused,
    free_port,
    share_slow,
    wait_up,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAID = "Look around the room and tell me what you see, briefly."
# route -> (path after the base URL, provider, body)
ROUTES = {
    "responses": ("/responses", "openai", {"model": "gpt-4o-mini", "input": SAID}),
    "messages": ("/v1/messages", "claude",
                 {"model": "claude-sonnet-4-5", "max_tokens": 64,
                  "messages": [{"role": "user", "content": SAID}]}),
    "completions": ("/completions", "openai",
                    {"model": "gpt-3.5-turbo-instruct", "prompt": SAID, "logprobs": 2}),
    "embeddings": ("/embeddings", "openai", {"model": "text-embedding-3-small", "input": SAID}),
}  # fmt: skip
STREAMED = ("responses", "messages", "completions")


def setup_attempts() -> dict[str, str]:
    """A running rollout attempt per provider in the bench database: provider -> token."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.models import EvalJob, RolloutAttempt, SeedRun
    from traces.tokens import token_hash, token_new

    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create(username="bench")
    tokens = {}
    for provider in ("openai", "claude"):
        job = EvalJob.objects.create(
            owner=owner, task_app_url="http://127.0.0.1:9/", policy={"provider": provider}
        )
        seed_run = SeedRun.objects.create(job=job, seed=0, status="running")
        tokens[provider] = token_new()
        RolloutAttempt.objects.create(
            seed_run=seed_run, number=1, run_id=uuid.uuid4().hex, status="running",
            token_hash=token_hash(tokens[provider]), started_at=timezone.now(),
        )  # fmt: skip
    return tokens


async def one_call(client: httpx.AsyncClient, url: str, body: dict, stream: bool) -> float:
    body = {**body, "stream": True} if stream else body
    t0 = time.perf_counter()
    async with client.stream("POST", url, json=body) as resp:
        async for _ in resp.aiter_bytes():
            pass
    if resp.status_code != 200:
        raise SystemExit(f"{url}: {resp.status_code}")
    return (time.perf_counter() - t0) * 1000


async def batch(url: str, body: dict, *, calls: int, concurrency: int, stream: bool):
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"x-api-key": "sk-caller", "authorization": "Bearer sk-caller"}
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=headers) as client:
        for _ in range(concurrency):  # warm connections
            await one_call(client, url, body, stream)
        times: list[float] = []

        async def worker() -> None:
            for _ in range(max(1, calls // concurrency)):
                times.append(await one_call(client, url, body, stream))

        # The measuring client's own garbage collections must land in nobody's figures.
        with collector_paused():
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return times


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q / 100))]


def start(port: int, app: str, env: dict | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning",
            "--port", str(port), app]  # fmt: skip
    return subprocess.Popen(argv, cwd=ROOT, env=env)


def scenarios(args, direct: dict[str, str], through: dict[str, str]) -> None:
    # slow: the share of calls more than 10 ms over the direct median, direct and through us.
    print(f"{'route':<30}{'direct p50':>11}{'p99':>8}{'slow':>7}{'via p50':>9}{'p99':>8}"
          f"{'slow':>7}{'added p50':>11}{'added p99':>11}  (ms)")  # fmt: skip
    per_round = max(1, args.calls // args.rounds)
    for concurrency in args.concurrency:
        for route, (_, _, body) in ROUTES.items():
            for stream in (False, True) if route in STREAMED else (False,):
                d: list[float] = []
                v: list[float] = []
                for _ in range(args.rounds):
                    run = dict(calls=per_round, concurrency=concurrency, stream=stream)
                    d += asyncio.run(batch(direct[route], body, **run))
                    v += asyncio.run(batch(through[route], body, **run))
                    time.sleep(0.2)  # let the writer thread save the round's records
                name = f"{route}{' stream' if stream else ''}, {concurrency} caller(s)"
                dp50, dp99, vp50, vp99 = pct(d, 50), pct(d, 99), pct(v, 50), pct(v, 99)
                ds, vs = share_slow(d, dp50), share_slow(v, dp50)
                print(f"{name:<30}{dp50:>11.2f}{dp99:>8.2f}{ds:>7.1%}{vp50:>9.2f}{vp99:>8.2f}"
                      f"{vs:>7.1%}{vp50 - dp50:>11.2f}{vp99 - dp99:>11.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per scenario and side")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per scenario")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 8])
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="evalhub-routes-bench-")
    os.environ.update(EVALHUB_DATA_DIR=tmp, DJANGO_SETTINGS_MODULE="evalhub.settings")
    os.environ.pop("DATABASE_URL", None)
    tokens = setup_attempts()
    openai_port, anthropic_port, web_port = free_port(), free_port(), free_port()
    openai_base = f"http://127.0.0.1:{openai_port}/v1"
    anthropic_base = f"http://127.0.0.1:{anthropic_port}"
    providers = {"claude": {"kind": "anthropic", "base_url": anthropic_base}}
    env = dict(os.environ, OPENAI_BASE_URL=openai_base, OPENAI_API_KEY="sk-bench",
               EVALHUB_PROVIDERS=json.dumps(providers), PORT=str(web_port), LOG_LEVEL="ERROR")  # fmt: skip
    procs = [
        start(openai_port, "evalhub.fakeprovider.server:app"),
        start(anthropic_port, "tests.support.fake_anthropic:app"),
        start(web_port, "evalhub.asgi:application", env),
    ]
    try:
        wait_up(f"{openai_base}/models", procs[0])
        wait_up(f"http://127.0.0.1:{web_port}/healthz", procs[2])
        inference = f"http://127.0.0.1:{web_port}/api/interceptor/v1"
        direct, through = {}, {}
        for route, (path, provider, _) in ROUTES.items():
            direct[route] = (anthropic_base if provider == "claude" else openai_base) + path
            through[route] = f"{inference}/{tokens[provider]}{path}"
        scenarios(args, direct, through)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=15)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
