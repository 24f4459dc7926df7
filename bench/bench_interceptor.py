"""Latency the interceptor adds to an LLM call, against calling the same upstream directly.

Starts the fake OpenAI upstream and evalhub's web process (uvicorn, one worker) as separate
processes on loopback ports, with a fresh SQLite database in a temporary directory, then, in
the same run, times calls made directly to the upstream and through the interceptor, at 1,
8 and 32 concurrent callers (aiohttp's client), plain and streaming, and the same through a bare
pass-through proxy (`bench/bare_proxy.py` with aiohttp's client, the Python floor, and the same
with httpx's) and, with `--litellm`, LiteLLM's proxy (from the side virtualenv `make bench`
builds). Rounds alternate the sides so drift hits them all. `make run`'s
worker (with its beat) runs beside the web process, idle, as a user has it (`--no-worker`: not).

    .venv/bin/python bench/bench_interceptor.py [--calls 2000] [--rounds 4] \\
        [--litellm .venv-bench/bin/litellm] [--before TREE] [--json out.json] \\
        [--database-url postgres://.../empty_db] [--no-worker]

`--before TREE` also measures an earlier evalhub (a checkout, e.g. `git worktree add --detach
/tmp/before <commit>`) in the same run, against the same database and provider.

Each row has, per side, the latency it added at the median and at p99 (its percentile less the
direct one) and `slow`: the share of its calls that took more than 10 ms longer than the direct
median (the direct calls' own share is the machine's noise).

Then each proxy at saturation (`--saturation-calls`, 0 to skip): driven by 64 callers of a light
load generator in a process of its own (`bench/load.py`), its calls per second and CPU per call,
the issue's throughput of one web process against the bare aiohttp proxy's in the same run.

Also prints Django's own floor: a request through Django's machinery (a 404 under /api/) against
the same through the lean interceptor handler (an unknown route), to show why the interceptor is
not a Django view.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import aiohttp
import httpx
from cpuwatch import process_cpu_s  # a sibling: run as bench/bench_interceptor.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MESSAGES = [
    {"role": "system", "content": "You are a careful agent in a text game."},
    {"role": "user", "content": "Look around the room and tell me what you see, briefly."},
]


@contextlib.contextmanager
def collector_paused():
    """No garbage collection in this (measuring) process while it times calls: a full one
    here takes tens of milliseconds and would land on whichever side was being timed."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
    # Running, its runner seen a day ahead and its seed under no lease: the worker beside
    # (`worker_start`) leaves it alone, as it leaves a job another live runner works on.
    job = EvalJob.objects.create(
        owner=owner, task_app_url="http://127.0.0.1:9/", policy={"model": "gpt-4o-mini"},
        status="running", runner_seen_at=timezone.now() + timedelta(days=1),
    )  # fmt: skip
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


def worker_start(env: dict[str, str]) -> subprocess.Popen:
    """`make run`'s worker with its beat (evalhub.runall), as a user has it beside the web
    process: on the same database and broker, idle (no job runs), polling its queue and
    re-dispatching as it does."""
    from django.conf import settings

    from evalhub.runall import commands

    return subprocess.Popen(commands(settings)["worker"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL)  # fmt: skip


async def one_call(session: aiohttp.ClientSession, url: str, stream: bool) -> float:
    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 64}
    if stream:
        body["stream"] = True
    t0 = time.perf_counter()
    async with session.post(url, json=body) as resp:
        if stream and resp.status == 200:
            async for _ in resp.content.iter_any():
                pass
        content = await resp.read()
    if resp.status != 200:
        raise SystemExit(f"{url}: {resp.status} {content[:300]!r}")
    return (time.perf_counter() - t0) * 1000


async def batch(url: str, *, calls: int, concurrency: int, stream: bool) -> list[float]:
    """`calls` calls from `concurrency` callers on aiohttp's pooled client: httpx's, which
    measured these rows before 2026-12-01, spent more CPU a call than the proxies it measured,
    and at 32 callers the direct calls to a provider that answers at once took 19 ms at the
    median, the client's own queue."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(min(concurrency, 20)):  # warm connections
            await one_call(session, url, stream)
        times: list[float] = []
        per_worker = calls // concurrency

        async def worker() -> None:
            for _ in range(per_worker):
                times.append(await one_call(session, url, stream))

        # The measuring client's own garbage collections must land in nobody's figures.
        with collector_paused():
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
    """CPU time (user + system, all threads) a process has used so far, in milliseconds."""
    return process_cpu_s(pid) * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


# A call is slow when it took this much longer than the direct median: the tail a user feels.
SLOW_MS = 10.0


def share_slow(values: list[float], direct_p50: float) -> float:
    """The share of calls (0-1) that took more than SLOW_MS longer than the direct median."""
    return sum(v - direct_p50 > SLOW_MS for v in values) / len(values) if values else 0.0


LITELLM_CONFIG = """model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: {upstream}
      api_key: sk-bench
litellm_settings:
  drop_params: true
  telemetry: false
"""


def start_litellm(litellm: str, upstream: str, tmp: str) -> tuple[subprocess.Popen, str]:
    """LiteLLM's proxy (from the side virtualenv) over the same upstream; (process, URL)."""
    config = Path(tmp) / "litellm.yaml"
    config.write_text(LITELLM_CONFIG.format(upstream=upstream))
    port = free_port()
    env = dict(
        os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR",
        LITELLM_TELEMETRY="False", DISABLE_SCHEMA_UPDATE="True",
    )  # fmt: skip
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen(
        [litellm, "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
         "--num_workers", "1"],
        cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def scenario(
    urls: dict[str, str],
    pids: dict[str, int],
    *,
    concurrency: int,
    stream: bool,
    calls: int,
    rounds: int,
) -> dict:
    """One scenario: every side in turn, `rounds` times; percentiles and CPU per call."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    cpu = dict.fromkeys(urls, 0.0)
    per_round = max(concurrency, calls // rounds)
    for _ in range(rounds):
        for name, url in urls.items():
            before = cpu_ms(pids[name]) if name in pids else 0.0
            times[name] += asyncio.run(
                batch(url, calls=per_round, concurrency=concurrency, stream=stream)
            )
            if name in pids:
                time.sleep(0.2)  # let evalhub's writer thread finish the round's records
                cpu[name] += cpu_ms(pids[name]) - before
    d50, d99 = pct(times["direct"], 50), pct(times["direct"], 99)
    out = {"concurrency": concurrency, "stream": stream, "direct_p50": d50, "direct_p99": d99,
           "direct_slow": share_slow(times["direct"], d50)}  # fmt: skip
    for name, values in times.items():
        if name == "direct":
            continue
        out[name] = {
            "p50": pct(values, 50), "p99": pct(values, 99),
            "added_p50": pct(values, 50) - d50, "added_p99": pct(values, 99) - d99,
            "slow": share_slow(values, d50),
            "cpu_ms_per_call": cpu[name] / len(values) if name in pids else None,
        }  # fmt: skip
    return out


def saturation(urls: dict[str, str], pids: dict[str, int], *, calls: int, concurrency: int,
               rounds: int) -> dict:  # fmt: skip
    """Each proxy driven as hard as it goes: `calls` calls from `concurrency` callers of the
    light load generator (`bench/load.py`, a process of its own), every proxy in turn,
    `rounds` times; the median calls per second of each, and its CPU per call."""
    out: dict = {"calls": calls, "concurrency": concurrency}
    load = [sys.executable, str(ROOT / "bench" / "load.py")]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in pids}

    def driven(name: str, n: int) -> float:
        """Seconds `n` calls took; the load generator's last words when it failed."""
        done = subprocess.run([*load, urls[name], str(n), str(concurrency)],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode:
            raise SystemExit(f"the load on {name} failed: {done.stderr.strip()[-2000:]}")
        return float(done.stdout.split()[-1])

    for name in pids:  # warm: pooled connections, the first rows written
        driven(name, 300)
    for _ in range(rounds):
        for name, pid in pids.items():
            before = cpu_ms(pid)
            seconds = driven(name, calls)
            time.sleep(0.2)  # the records of the round written (evalhub's writer threads)
            runs[name].append((calls / seconds, (cpu_ms(pid) - before) / calls))
    for name, values in runs.items():
        out[name] = {"calls_per_s": statistics.median(rate for rate, _ in values),
                     "cpu_ms_per_call": statistics.median(cpu for _, cpu in values)}  # fmt: skip
    return out


def print_row(row: dict) -> None:
    name = f"{row['concurrency']} caller{'s' if row['concurrency'] > 1 else ''}, " + (
        "stream" if row["stream"] else "plain"
    )
    cells = [f"{name:<20}", f"direct {row['direct_p50']:.2f}/{row['direct_p99']:.2f} "
             f"slow {row['direct_slow']:.1%}"]  # fmt: skip
    for side in ("evalhub", "before", "bare", "bare_httpx", "litellm"):
        if side in row:
            r = row[side]
            cpu = f" cpu {r['cpu_ms_per_call']:.2f}" if r["cpu_ms_per_call"] is not None else ""
            cells.append(f"{side} +{r['added_p50']:.2f}/+{r['added_p99']:.2f} "
                         f"slow {r['slow']:.1%}{cpu}")  # fmt: skip
    print("  ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per scenario and side")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per scenario")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32])
    parser.add_argument("--modes", nargs="*", default=["plain", "stream"])
    parser.add_argument("--litellm", help="the `litellm` executable: also measure its proxy")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--before", metavar="TREE",
                        help="a checkout of an earlier evalhub (e.g. `git worktree add /tmp/old "
                             "<commit>`): its web process is measured too, as `before`")  # fmt: skip
    parser.add_argument("--database-url", help="an empty database of your own (PostgreSQL, as in "
                        "production) instead of a fresh SQLite file")  # fmt: skip
    parser.add_argument(
        "--saturation-calls",
        type=int,
        default=6000,
        help="calls per proxy and round driven at saturation (0: not measured)",
    )
    parser.add_argument("--no-worker", dest="worker", action="store_false",
                        help="without `make run`'s worker (and its beat) running beside the web "
                             "process, idle, on the same database and broker")  # fmt: skip
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="evalhub-interceptor-bench-")
    os.environ.update(EVALHUB_DATA_DIR=tmp, DJANGO_SETTINGS_MODULE="evalhub.settings")
    os.environ.pop("DATABASE_URL", None)
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    token = setup_attempt()

    fake_port, web_port, bare_port, httpx_port = free_port(), free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{fake_port}/v1"
    uvicorn = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning"]
    fake = subprocess.Popen(
        [*uvicorn, "--port", str(fake_port), "evalhub.fakeprovider.server:app"], cwd=ROOT
    )
    env = dict(os.environ, OPENAI_BASE_URL=upstream, OPENAI_API_KEY="sk-bench",
               PORT=str(web_port), LOG_LEVEL="ERROR")  # fmt: skip
    web = subprocess.Popen(
        [*uvicorn, "--port", str(web_port), "evalhub.asgi:application"], cwd=ROOT, env=env
    )
    bare = subprocess.Popen(
        [*uvicorn, "--port", str(bare_port), "bench.bare_proxy:app"],
        cwd=ROOT, env=dict(os.environ, UPSTREAM=upstream),
    )  # fmt: skip
    # The same bare proxy with httpx as its client: what the client alone changes.
    bare_httpx = subprocess.Popen(
        [*uvicorn, "--port", str(httpx_port), "bench.bare_proxy:app"],
        cwd=ROOT, env=dict(os.environ, UPSTREAM=upstream, BARE_CLIENT="httpx"),
    )  # fmt: skip
    procs = [web, bare, bare_httpx, fake]
    if args.worker:
        procs.insert(0, worker_start(env))
    urls = {
        "direct": f"{upstream}/chat/completions",
        "evalhub": f"http://127.0.0.1:{web_port}/api/interceptor/v1/{token}/chat/completions",
        "bare": f"http://127.0.0.1:{bare_port}/chat/completions",
        "bare_httpx": f"http://127.0.0.1:{httpx_port}/chat/completions",
    }
    pids = {"evalhub": web.pid, "bare": bare.pid, "bare_httpx": bare_httpx.pid}
    try:
        wait_up(f"{upstream}/models", fake)
        wait_up(f"http://127.0.0.1:{web_port}/healthz", web)
        if args.before:  # the same database and provider, the earlier code (its own cwd first)
            before_port = free_port()
            before = subprocess.Popen([*uvicorn, "--port", str(before_port), "evalhub.asgi:application"],
                                      cwd=args.before, env=env)  # fmt: skip
            procs.insert(0, before)
            wait_up(f"http://127.0.0.1:{before_port}/healthz", before)
            urls["before"] = (
                f"http://127.0.0.1:{before_port}/api/interceptor/v1/{token}/chat/completions"
            )
            pids["before"] = before.pid
        if args.litellm:
            litellm, base = start_litellm(args.litellm, upstream, tmp)
            procs.insert(0, litellm)
            wait_up(f"{base}/health/liveliness", litellm)
            urls["litellm"] = f"{base}/chat/completions"
            pids["litellm"] = litellm.pid
        rows = []
        for concurrency in args.concurrency:
            for stream in [m == "stream" for m in args.modes]:
                row = scenario(urls, pids, concurrency=concurrency, stream=stream,
                               calls=args.calls, rounds=args.rounds)  # fmt: skip
                print_row(row)
                rows.append(row)
        out: dict = {"scenarios": rows}
        if args.saturation_calls:
            out["saturation"] = saturation(urls, pids, calls=args.saturation_calls,
                                           concurrency=64, rounds=3)  # fmt: skip
            print("saturation, 64 callers: " + "  ".join(
                f"{name} {r['calls_per_s']:.0f} calls/s cpu {r['cpu_ms_per_call']:.3f} ms"
                for name, r in out["saturation"].items() if isinstance(r, dict)), flush=True)  # fmt: skip
        django_404 = asyncio.run(simple_get(f"http://127.0.0.1:{web_port}/api/no-such-thing", 500))
        lean_404 = asyncio.run(
            simple_get(f"http://127.0.0.1:{web_port}/api/interceptor/v1/x/no-such-thing", 500)
        )
        print(
            f"floor, 1 caller, a 404: through Django p50 {pct(django_404, 50):.2f} ms, "
            f"through the lean handler p50 {pct(lean_404, 50):.2f} ms"
        )
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
