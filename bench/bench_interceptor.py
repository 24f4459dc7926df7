"""Latency the interceptor adds to an LLM call, against calling the same upstream directly.

Starts the fake OpenAI upstream and evalhub's web process (uvicorn, one worker) as separate
processes on loopback ports, with a fresh SQLite database in a temporary directory, then, in
the same run, times calls made directly to the upstream and through the interceptor, at 1 and 32
concurrent callers, plain and streaming. Rounds alternate direct/interceptor so drift hits both.

    .venv/bin/python bench/bench_interceptor.py [--calls 2000] [--rounds 4]

Also prints Django's own floor: a request through Django's machinery (a 404 under /api/) against
the same through the lean interceptor handler (an unknown route), to show why the interceptor is
not a Django view.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MESSAGES = [
    {"role": "system", "content": "You are a careful agent in a text game."},
    {"role": "user", "content": "Look around the room and tell me what you see, briefly."},
]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: process exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def setup_attempt() -> str:
    """A running rollout attempt in the bench database; returns its interceptor token."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.models import EvalJob, RolloutAttempt, SeedRun
    from traces.tokens import token_hash, token_new

    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create(username="bench")
    job = EvalJob.objects.create(
        owner=owner, task_app_url="http://127.0.0.1:9/", policy={"model": "gpt-4o-mini"}
    )
    seed_run = SeedRun.objects.create(job=job, seed=0, status="running")
    token = token_new()
    RolloutAttempt.objects.create(
        seed_run=seed_run,
        number=1,
        run_id=uuid.uuid4().hex,
        token_hash=token_hash(token),
        status="running",
        started_at=timezone.now(),
    )
    return token


async def one_call(client: httpx.AsyncClient, url: str, stream: bool) -> float:
    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 64}
    t0 = time.perf_counter()
    if stream:
        body["stream"] = True
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
            async for _ in resp.aiter_bytes():
                pass
    else:
        resp = await client.post(url, json=body)
        resp.read()
    if resp.status_code != 200:
        raise SystemExit(f"{url}: {resp.status_code} {resp.text[:300]}")
    return (time.perf_counter() - t0) * 1000


async def batch(url: str, *, calls: int, concurrency: int, stream: bool) -> list[float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        for _ in range(min(concurrency, 20)):  # warm connections
            await one_call(client, url, stream)
        times: list[float] = []
        per_worker = calls // concurrency

        async def worker() -> None:
            for _ in range(per_worker):
                times.append(await one_call(client, url, stream))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return times


async def simple_get(url: str, n: int) -> list[float]:
    async with httpx.AsyncClient(timeout=30) as client:
        await client.get(url)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            (await client.get(url)).read()
            times.append((time.perf_counter() - t0) * 1000)
        return times


def cpu_ms(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per scenario and side")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per scenario")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--modes", nargs="*", default=["plain", "stream"])
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="evalhub-interceptor-bench-")
    os.environ.update(EVALHUB_DATA_DIR=tmp, DJANGO_SETTINGS_MODULE="evalhub.settings")
    os.environ.pop("DATABASE_URL", None)
    token = setup_attempt()

    fake_port, web_port, bare_port = free_port(), free_port(), free_port()
    uvicorn = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning"]
    fake = subprocess.Popen(
        [*uvicorn, "--port", str(fake_port), "tests.support.fake_openai:app"], cwd=ROOT
    )
    env = dict(
        os.environ,
        OPENAI_BASE_URL=f"http://127.0.0.1:{fake_port}/v1",
        OPENAI_API_KEY="sk-bench",
        PORT=str(web_port),
        LOG_LEVEL="ERROR",
    )
    web = subprocess.Popen(
        [*uvicorn, "--port", str(web_port), "evalhub.asgi:application"], cwd=ROOT, env=env
    )
    bare = subprocess.Popen(
        [*uvicorn, "--port", str(bare_port), "bench.bare_proxy:app"],
        cwd=ROOT,
        env=dict(os.environ, UPSTREAM=f"http://127.0.0.1:{fake_port}/v1"),
    )
    try:
        wait_up(f"http://127.0.0.1:{fake_port}/v1/models", fake)
        wait_up(f"http://127.0.0.1:{web_port}/healthz", web)
        direct = f"http://127.0.0.1:{fake_port}/v1/chat/completions"
        through = f"http://127.0.0.1:{web_port}/api/interceptor/v1/{token}/chat/completions"
        bare_url = f"http://127.0.0.1:{bare_port}/chat/completions"

        print(f"{'scenario':<24}{'direct p50':>11}{'p99':>8}{'via p50':>9}{'p99':>8}"
              f"{'added p50':>11}{'added p99':>11}{'bare proxy added p50':>22}{'p99':>8}"
              f"{'CPU/call':>10}{'bare CPU':>10}  (ms)")  # fmt: skip
        per_round = max(1, args.calls // args.rounds)
        for concurrency in args.concurrency:
            for stream in [m == "stream" for m in args.modes]:
                d: list[float] = []
                v: list[float] = []
                b: list[float] = []
                cpu = {"via": 0.0, "bare": 0.0}
                for _ in range(args.rounds):
                    d += asyncio.run(
                        batch(direct, calls=per_round, concurrency=concurrency, stream=stream)
                    )
                    before = cpu_ms(web.pid)
                    v += asyncio.run(
                        batch(through, calls=per_round, concurrency=concurrency, stream=stream)
                    )
                    time.sleep(0.2)  # let the writer thread finish the round's records
                    cpu["via"] += cpu_ms(web.pid) - before
                    before = cpu_ms(bare.pid)
                    b += asyncio.run(
                        batch(bare_url, calls=per_round, concurrency=concurrency, stream=stream)
                    )
                    cpu["bare"] += cpu_ms(bare.pid) - before
                name = f"{concurrency} caller{'s' if concurrency > 1 else ''}, " + (
                    "stream" if stream else "plain"
                )
                dp50, dp99, vp50, vp99 = pct(d, 50), pct(d, 99), pct(v, 50), pct(v, 99)
                print(
                    f"{name:<24}{dp50:>11.2f}{dp99:>8.2f}{vp50:>9.2f}{vp99:>8.2f}"
                    f"{vp50 - dp50:>11.2f}{vp99 - dp99:>11.2f}"
                    f"{pct(b, 50) - dp50:>22.2f}{pct(b, 99) - dp99:>8.2f}"
                    f"{cpu['via'] / len(v):>10.2f}{cpu['bare'] / len(b):>10.2f}"
                )

        django_404 = asyncio.run(simple_get(f"http://127.0.0.1:{web_port}/api/no-such-thing", 1000))
        lean_404 = asyncio.run(
            simple_get(f"http://127.0.0.1:{web_port}/api/interceptor/v1/x/no-such-thing", 1000)
        )
        print(
            f"floor, 1 caller, a 404: through Django p50 {pct(django_404, 50):.2f} ms, "
            f"through the lean handler p50 {pct(lean_404, 50):.2f} ms"
        )
    finally:
        for proc in (web, bare, fake):
            proc.terminate()
            proc.wait(timeout=15)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
