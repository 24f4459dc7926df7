"""How fast workers run a big job, and what evalhub costs over calling the task app directly.

    .venv/bin/python bench/bench_workers.py [--seeds 2000] [--max-concurrent 64] [--delay 0]
        [--workers 1 2 4] [--backend postgres|sqlite] [--wall-delay 0.05] [--worker-cpu 0.25]
        [--capped-rounds 3] [--json out.json]

Everything is real and local, in a fresh data directory: with `--backend postgres` (the
default) a PRIVATE PostgreSQL cluster and Redis server started for the run on free ports
(tests/support/private_services.py; nothing shared is touched), with `sqlite` the embedded
default. For each worker count, that many Celery worker processes (`--pool threads`) run one
job of `--seeds` seeds against a FastAPI task app (a process of its own, as a user's is) on a
loopback port answering each rollout after `--delay` seconds; rollouts/s is succeeded seeds
over first claim to completion.

With `--worker-cpu F` each worker process is also run, for a second series, held to F of one
CPU by a cgroup of its own (bench/cpucap.py; Linux, as root): every worker a small machine
of its own, so N of them over one measures evalhub's scale-out rather than the cores this
machine has (on 2 cores, four uncapped workers share what one nearly fills). With
`--capped-rounds N` that series runs N times, each worker count in turn every round: the same
run differs by a quarter from one minute to the next on a shared machine, so N over one is read
within a round, and every round's ratio is kept.

Then, with `--wall-delay` > 0, the same seeds against a task app taking that long per rollout:
once posted straight at the task app by an asyncio client holding `--max-concurrent` in flight,
in a process of its own (the floor), once as an evalhub job with the same `max_concurrent` on one
worker; `--wall-rounds` times in turn, the medians kept with every round's pair.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import cpucap  # a sibling: run as bench/bench_workers.py
from cpucap import CpuCap
from cpuwatch import CpuWatch, machine_busy_ticks, process_cpu_s

ROOT = Path(__file__).resolve().parents[1]
# The zip due longer than this after a job ends is not waited for (`run_job`).
ZIP_WAIT_MOST_S = 60.0
sys.path.insert(0, str(ROOT))


def private_backend(workdir: Path) -> dict[str, str]:
    """A private PostgreSQL database and Redis server; the environment pointing at them."""
    from tests.support.private_services import PrivatePostgres, PrivateRedis

    redis, postgres = PrivateRedis(workdir), PrivatePostgres(workdir)
    redis.start()
    postgres.init()
    url = postgres.create_database(f"evalhub_bench_{uuid.uuid4().hex[:8]}")
    private_backend.stop = lambda: (redis.stop(), postgres.destroy())
    # The processes whose CPU a run counts as the database's (the postmaster: its backends are
    # its children) and the broker's.
    postmaster = int((postgres.datadir / "postmaster.pid").read_text().split()[0])
    private_backend.roots = {"postgres": postmaster, "redis": redis.proc.pid}
    return {"DATABASE_URL": url, "REDIS_URL": redis.url, "DATABASE_CONN_MAX_AGE": "60"}


def setup(backend: str) -> tuple[str, dict[str, str]]:
    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    Path(data_dir).chmod(0o755)
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    os.environ.update(
        EVALHUB_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="evalhub.settings",
        EVALHUB_CELERY_QUEUE=f"bench-{uuid.uuid4().hex[:6]}", LOG_LEVEL="WARNING",
    )  # fmt: skip
    extra = private_backend(Path(data_dir)) if backend == "postgres" else {}
    os.environ.update(extra)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return data_dir, extra


def run_job(
    *,
    workers: int,
    task_url: str,
    seeds: int,
    max_concurrent: int,
    worker_cpu: float | None = None,
    count_queries: bool = False,
    watch: dict[str, int] | None = None,
) -> dict:
    """`workers` worker processes (each held to `worker_cpu` of a CPU when given) run one
    job; its figures, with the workers' CPU per rollout (from job created to job over) and,
    with `count_queries`, their database statements by kind (bench/counted_worker.py). With
    `watch` (a name to the pid of a process tree: the task app, the database), where the CPU
    went meanwhile, by process and over the whole machine (`cpu`)."""
    from django.contrib.auth import get_user_model

    from jobs import services
    from jobs.models import EvalJob, SeedRun
    from tests.support.servers import ChildProcess, wait_until

    # One message per job: the other workers lend a hand by themselves (jobs/worker/runner.py).
    env = dict(os.environ)
    procs, counted = [], []
    for n in range(workers):
        launcher = ["-m", "celery"]
        if count_queries:
            counted.append(
                Path(os.environ["EVALHUB_DATA_DIR"]) / f"queries-{uuid.uuid4().hex}.json"
            )
            launcher = [str(ROOT / "bench" / "counted_worker.py"), str(counted[-1])]
        procs.append(ChildProcess(f"bench-worker-{n}", [
            sys.executable, *launcher, "-A", "evalhub", "worker",
            "-Q", os.environ["EVALHUB_CELERY_QUEUE"], "-n", f"bench{n}-{uuid.uuid4().hex[:6]}@%h",
            "--pool", "threads", "--concurrency", "8", "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat"], env))  # fmt: skip
    cap = CpuCap(worker_cpu) if worker_cpu else None
    groups = [cap.cap(proc.proc.pid) for proc in procs] if cap else []
    try:
        # A worker held to a slice of a CPU starts as many times slower (its imports alone took
        # most of a minute at a tenth of a CPU on a slow machine).
        start_s = 60 / (worker_cpu or 1.0)
        for proc in procs:
            wait_until(lambda p=proc: "ready" in p.log() or p.proc.poll() is not None,
                       timeout=start_s, what="a worker")  # fmt: skip
        time.sleep(1.0)  # "ready" is logged a moment before the consumer polls
        owner, _ = get_user_model().objects.get_or_create(username="bench")
        spec = services.JobSpec(task_app_url=task_url, seeds=list(range(seeds)),
                                max_concurrent=max_concurrent, timeout=60)  # fmt: skip
        _connections_open()
        cpu_before = sum(process_cpu_s(proc.proc.pid) for proc in procs)
        watching = CpuWatch(**(watch or {}))
        created = time.time()
        with watching:
            job = services.job_create(owner=owner, spec=spec)

            def over():
                row = EvalJob.objects.get(pk=job.pk)
                return row if row.is_terminal else None

            job = wait_until(over, timeout=3600, interval=0.1, what="the job to end")
        # To its end as the job's row says, not as this look saw it (up to 0.1 s later).
        wall = job.completed_at.timestamp() - created
        cpu = sum(process_cpu_s(proc.proc.pid) for proc in procs) - cpu_before
        if counted:
            time.sleep(0.6)  # the counts are written twice a second
        queries = _queries(counted, seeds)
        # As a job ends a worker builds its traces zip: waited for here, so that it does not
        # run beside the next measurement; not when it is due too late to matter (a run with
        # EVALHUB_TRACES_ZIP_AFTER_S set high, to leave the zip's members out).
        zip_s = None
        if float(os.environ.get("EVALHUB_TRACES_ZIP_AFTER_S", "5")) <= ZIP_WAIT_MOST_S:
            wait_until(lambda: EvalJob.objects.filter(pk=job.pk).exclude(traces_zip_name="")
                       .exists(), timeout=3600, interval=0.1, what="the job's zip")  # fmt: skip
            zip_s = time.time() - created - wall
        throttled = [CpuCap.throttled(group) for group in groups]
    finally:
        for proc in procs:
            proc.stop()
        if cap:
            cap.close()
    succeeded = SeedRun.objects.filter(job=job, status="succeeded").count()
    run_s = (job.completed_at - job.started_at).total_seconds()
    span = _rollouts_span(job)
    return {"workers": workers, "status": job.status, "succeeded": succeeded, "seeds": seeds,
            "wall_s": wall, "run_s": run_s, "rollouts_per_s": succeeded / run_s,
            **span, "rollouts_alone_per_s": succeeded / span["rollouts_s"],
            "zip_after_s": zip_s, "worker_cpu": worker_cpu,
            "cpu_ms_per_rollout": cpu * 1000 / seeds, "queries": queries,
            "cpu": _cpu_per_rollout(watching, seeds, worker=cpu) if watch else None,
            "throttled": sum(throttled) / len(throttled) if throttled else None}  # fmt: skip


def _connections_open() -> None:
    """Open this process's database and broker connections before a job is timed, as a web
    process serving `POST /api/eval/jobs` has them (and Celery's result backend, which its
    first message loads): opened by the first job here, they took more than 100 ms of its
    wall time, which no user's job waits for."""
    from django.db import connection

    from evalhub.celery import app

    connection.ensure_connection()
    app.backend  # noqa: B018 (loaded on first use)
    with app.producer_or_acquire() as producer:
        producer.connection.ensure_connection()


def _cpu_per_rollout(watching: CpuWatch, seeds: int, **more: float) -> dict[str, float]:
    """Milliseconds of CPU per rollout by process (`more` adds some measured apart), and the
    machine's cores busy on average over the run (`cores_busy`)."""
    used = {**watching.used, **more}
    return {**{name: s * 1000 / seeds for name, s in used.items()},
            "cores_busy": watching.cores_busy()}  # fmt: skip


def _cpu_print(cpu: dict[str, float]) -> str:
    """`_cpu_per_rollout`'s figures in a line."""
    parts = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu.items() if name != "cores_busy")
    return f"CPU ms a rollout: {parts}; the machine's cores busy {cpu['cores_busy']:.2f}"


def _rollouts_span(job) -> dict[str, float]:
    """The job's run in three parts, from its rows: from its start to its first attempt
    (`first_s`), its attempts, first start to last end (`rollouts_s`), and from there to the
    job's end (`end_s`: the results left to write, the summary of every row, the commit)."""
    from django.db.models import Max, Min

    from jobs.models import RolloutAttempt

    span = RolloutAttempt.objects.filter(seed_run__job=job).aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )
    return {"first_s": (span["first"] - job.started_at).total_seconds(),
            "rollouts_s": (span["last"] - span["first"]).total_seconds(),
            "end_s": (job.completed_at - span["last"]).total_seconds()}  # fmt: skip


def _span_print(run: dict) -> str:
    return (f"; its rollouts alone {run['rollouts_alone_per_s']:.1f}/s (the first "
            f"{run['first_s']:.2f}s after the start, the job's end {run['end_s']:.2f}s after the "
            "last)")  # fmt: skip


def _queries(paths: list[Path], seeds: int) -> dict[str, dict[str, float]] | None:
    """Statements per rollout by kind, and the milliseconds a rollout spent in them, over the
    workers' counts (bench/counted_worker.py)."""
    if not paths:
        return None
    total: dict[str, list[float]] = {}
    for path in paths:
        counted = json.loads(path.read_text())
        for name, n in counted["counts"].items():
            kind = total.setdefault(name, [0, 0.0])
            kind[0] += n
            kind[1] += counted["seconds"].get(name, 0.0)
    return {name: {"per_rollout": n / seeds, "ms_per_rollout": s * 1000 / seeds}
            for name, (n, s) in sorted(total.items(), key=lambda kv: -kv[1][1])}  # fmt: skip


def _queries_print(queries: dict[str, dict[str, float]] | None) -> None:
    if queries:
        statements = sum(q["per_rollout"] for name, q in queries.items() if name != "COMMIT")
        ms = sum(q["ms_per_rollout"] for q in queries.values())
        commits = queries.get("COMMIT", {}).get("per_rollout", 0)
        print(f"  statements per rollout {statements:.2f}, commits {commits:.2f}, "
              f"{ms:.2f} ms a rollout in them: "
              + ", ".join(f"{name} {q['per_rollout']:.3f} ({q['ms_per_rollout']:.3f} ms)"
                          for name, q in queries.items()), flush=True)  # fmt: skip


@contextlib.contextmanager
def task_app_served(*, delay_s: float) -> Iterator[tuple[str, int, Any]]:
    """The task app in a process of its own, as a user's is: in this one it shared the
    interpreter with the measuring loop, and this process's heap (Django, the test support)
    made its full garbage collections take 150-190 ms, every 0.7 s under load: a quarter of
    the rollouts waited one out, through evalhub and straight alike. Its own full collections
    still stop it for 115-166 ms, three or four times in 4,000 rollouts, whoever calls it: the
    third value counts them, [how many, their seconds] so far (`_pauses_since`)."""
    from tests.support.servers import free_port, wait_until

    port = free_port()
    context = multiprocessing.get_context("spawn")
    pauses = context.Array("d", 2)
    server = context.Process(target=_task_app_serve, args=(port, delay_s, pauses), daemon=True)
    server.start()
    try:
        wait_until(lambda: _accepts(port) or not server.is_alive(), timeout=60,
                   what="the task app")  # fmt: skip
        if not server.is_alive():
            raise RuntimeError("the task app did not start")
        yield f"http://127.0.0.1:{port}", server.pid, pauses
    finally:
        server.terminate()
        server.join(timeout=10)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _task_app_serve(port: int, delay_s: float, pauses) -> None:
    import gc

    import uvicorn

    from tests.support.task_app import task_app_create

    app, _ = task_app_create(delay_s=delay_s, keep_requests=False)
    started = [0.0]

    def timed(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:  # the shared values are written by this process only
            pauses[0] += 1
            pauses[1] += time.perf_counter() - started[0]

    gc.callbacks.append(timed)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def direct_in_child(task_url: str, *, seeds: int, concurrency: int) -> tuple[float, float, float]:
    """`direct` in a process of its own, as the worker is: (its wall seconds, the CPU seconds
    the client spent, the machine's cores busy on average meanwhile)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(_direct_sync, task_url, seeds, concurrency).result()


def _direct_sync(task_url: str, seeds: int, concurrency: int) -> tuple[float, float, float]:
    import django

    django.setup()
    cpu, busy = time.process_time(), machine_busy_ticks()
    wall = asyncio.run(direct(task_url, seeds=seeds, concurrency=concurrency))
    busy_s = (machine_busy_ticks() - busy) / os.sysconf("SC_CLK_TCK")
    return wall, time.process_time() - cpu, busy_s / wall


async def direct(task_url: str, *, seeds: int, concurrency: int) -> float:
    """The floor: the same rollouts posted straight at the task app by aiohttp's client (one
    httpx client with a pool this large is slower than the task app: httpcore scans its whole
    pool on each request); wall seconds."""
    from jobs.worker import taskapp

    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(seed: int) -> None:
            body = taskapp.rollout_request_build(
                run_id=f"run-{seed}", seed=seed, env_name=None, env_config={},
                policy={"model": "gpt-4o-mini"}, inference_url="http://127.0.0.1:9/v1",
                trace_correlation_id=f"run-{seed}", mode="eval", timeout_s=60,
            )  # fmt: skip
            async with gate:
                # A connection the server closed as it was reused is tried again, as the
                # runner retries a broken connection (a transient failure).
                for tries_left in (2, 1, 0):
                    try:
                        async with session.post(f"{task_url}/rollout", json=body) as resp:
                            resp.raise_for_status()
                            await resp.read()
                        return
                    except aiohttp.ClientConnectionError:
                        if not tries_left:
                            raise
                        retried.append(seed)

        retried: list[int] = []
        started = time.perf_counter()
        await asyncio.gather(*(one(s) for s in range(seeds)))
        if retried:
            print(f"direct: {len(retried)} request(s) tried again after a broken connection")
        return time.perf_counter() - started


def wall_time(args: argparse.Namespace) -> dict:
    """The job's wall time through evalhub against the direct client's, `--wall-rounds` times
    in turn (the machine's speed drifts from one minute to the next: a ratio is read within its
    round): the medians, every round's pair, and where the CPU of the last round went."""
    rounds = []
    with task_app_served(delay_s=args.wall_delay) as (task_url, task_app, pauses):
        for _ in range(args.wall_rounds):
            # The machine's cores busy over the direct run alone, not the child's start.
            before = list(pauses)
            with CpuWatch(task_app=task_app) as watching:
                floor, client_s, cores = direct_in_child(
                    task_url, seeds=args.seeds, concurrency=args.max_concurrent
                )
            direct_paused, before = _pauses_since(before, pauses), list(pauses)
            direct_cpu = {**_cpu_per_rollout(watching, args.seeds, client=client_s),
                          "cores_busy": cores}  # fmt: skip
            roots = {"task_app": task_app, **getattr(private_backend, "roots", {})}
            via = run_job(workers=1, task_url=task_url, seeds=args.seeds,
                          max_concurrent=args.max_concurrent,
                          count_queries=args.count_queries, watch=roots)  # fmt: skip
            rounds.append({"direct_s": floor, "evalhub_wall_s": via["wall_s"],
                           "evalhub_run_s": via["run_s"], "direct_task_app_paused": direct_paused,
                           "evalhub_task_app_paused": _pauses_since(before, pauses)})  # fmt: skip
            print(f"direct {floor:.2f}s vs evalhub {via['wall_s']:.2f}s (created -> completed), "
                  f"{args.seeds} seeds at {args.wall_delay}s, concurrency {args.max_concurrent}; "
                  f"{via['cpu_ms_per_rollout']:.2f} ms worker CPU per rollout"
                  + _span_print(via), flush=True)  # fmt: skip
            print(f"  the task app's full collections: {_paused_print(direct_paused)} through "
                  f"the direct client, {_paused_print(rounds[-1]['evalhub_task_app_paused'])} "
                  "through evalhub")  # fmt: skip
            print(f"  direct: {_cpu_print(direct_cpu)}")
            print(f"  evalhub: {_cpu_print(via['cpu'])}")
            _queries_print(via["queries"])
    return {"delay_s": args.wall_delay, "seeds": args.seeds, "concurrency": args.max_concurrent,
            **{key: statistics.median(r[key] for r in rounds)
               for key in ("direct_s", "evalhub_wall_s", "evalhub_run_s")},
            "rounds": rounds, "cpu_ms_per_rollout": via["cpu_ms_per_rollout"],
            "direct_cpu": direct_cpu, "evalhub_cpu": via["cpu"]}  # fmt: skip


def _pauses_since(before: list[float], pauses) -> list[float]:
    """[the task app's full collections, their seconds] since `before` (`task_app_served`)."""
    return [now - then for now, then in zip(pauses, before, strict=True)]


def _paused_print(paused: list[float]) -> str:
    return f"{paused[0]:.0f} ({paused[1] * 1000:.0f} ms)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.0, help="task app seconds per rollout")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--wall-delay", type=float, default=0.05,
                        help="task app seconds per rollout of the direct-vs-evalhub run; 0: skip")  # fmt: skip
    parser.add_argument("--worker-cpu", type=float,
                        help="also run each worker count with every worker held to this "
                             "fraction of a CPU (a cgroup each; needs root)")  # fmt: skip
    parser.add_argument("--capped-rounds", type=int, default=1,
                        help="run the capped series this many times, one worker count after "
                             "the other each time: a ratio is read within its round")  # fmt: skip
    parser.add_argument("--wall-rounds", type=int, default=1,
                        help="run the direct-vs-evalhub pair this many times in turn")  # fmt: skip
    parser.add_argument("--count-queries", action="store_true",
                        help="count the workers' database statements per rollout, by kind")  # fmt: skip
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if args.worker_cpu and cpucap.why_not():
        print(f"--worker-cpu: {cpucap.why_not()}; the capped series is skipped", flush=True)
        args.worker_cpu = None

    # Stopped by a signal (`timeout`, `kill`), the run still stops its private PostgreSQL and
    # Redis (the `finally` below): left running, they outlived it, a cluster per killed run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    data_dir, _ = setup(args.backend)
    out: dict = {"backend": args.backend, "runs": []}
    try:
        with task_app_served(delay_s=args.delay) as (task_url, _, _):
            for workers in args.workers:
                run = run_job(workers=workers, task_url=task_url, seeds=args.seeds,
                              max_concurrent=args.max_concurrent,
                              count_queries=args.count_queries)  # fmt: skip
                print(f"{workers} worker(s): {run['succeeded']}/{args.seeds} succeeded, "
                      f"run {run['run_s']:.2f}s, {run['rollouts_per_s']:.1f} rollouts/s, "
                      f"{run['cpu_ms_per_rollout']:.2f} ms worker CPU per rollout; "
                      + (f"traces zip stored {run['zip_after_s']:.1f}s after the job ended"
                         if run["zip_after_s"] is not None else "traces zip not waited for")
                      + _span_print(run), flush=True)  # fmt: skip
                _queries_print(run["queries"])
                out["runs"].append(run)
            # This machine's speed drifts from one minute to the next by up to a quarter: each
            # round runs every worker count in turn, and a ratio is read within its round.
            rounds = range(args.capped_rounds if args.worker_cpu else 0)
            for capped_round, workers in ((r, w) for r in rounds for w in args.workers):
                run = run_job(workers=workers, task_url=task_url, seeds=args.seeds,
                              max_concurrent=args.max_concurrent, worker_cpu=args.worker_cpu,
                              count_queries=args.count_queries)  # fmt: skip
                run["round"] = capped_round
                print(f"{workers} worker(s) at {args.worker_cpu} CPU each: {run['succeeded']}/"
                      f"{args.seeds} succeeded, run {run['run_s']:.2f}s, "
                      f"{run['rollouts_per_s']:.1f} rollouts/s, {run['cpu_ms_per_rollout']:.2f} ms "
                      f"worker CPU per rollout; throttled in "
                      f"{run['throttled']:.0%} of periods" + _span_print(run), flush=True)  # fmt: skip
                _queries_print(run["queries"])
                out.setdefault("capped", []).append(run)
        if args.wall_delay > 0:
            out["wall"] = wall_time(args)
    finally:
        from django.db import connections

        connections.close_all()
        if hasattr(private_backend, "stop"):
            private_backend.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    ok = all(r["status"] == "completed" and r["succeeded"] == r["seeds"]
             for r in out["runs"] + out.get("capped", []))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
