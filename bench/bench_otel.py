"""OpenTelemetry export towards a collector that is not there: the same job with export off and
with `OTEL_EXPORTER_OTLP_ENDPOINT` at a closed loopback port, its wall time beside each other,
and what the worker's drop counter says on /healthz.

    .venv/bin/python bench/bench_otel.py [--seeds 200] [--rounds 2] [--max-concurrent 8] [--delay 0.05] [--json out.json]

Everything real and local, in a throw-away data directory (SQLite, the file-system broker):
the fake provider and the test task app (tests/support/task_app.py, one chat completion per
rollout through the interceptor) on loopback ports, one web process, and for each job a fresh
Celery worker, with export off or on. The modes alternate for `--rounds` rounds. A job's wall
time runs from its creation to its end; then the bench waits for its traces zip (the export
runs in the zip's tasks, after the samples end) and, with export on, for /healthz to report
every span of the job dropped (samples, attempts and LLM calls).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup() -> str:
    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):  # fmt: skip
        os.environ.pop(name, None)
    os.environ.update(
        EVALHUB_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="evalhub.settings",
        EVALHUB_CELERY_QUEUE=f"bench-{uuid.uuid4().hex[:6]}", LOG_LEVEL="WARNING",
    )  # fmt: skip
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return data_dir


def web_start(provider_url: str):
    from tests.support.servers import ChildProcess, free_port, wait_until

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PORT": str(port), "EVALHUB_PUBLIC_URL": base,
           "OPENAI_BASE_URL": provider_url, "OPENAI_API_KEY": "sk-bench-provider"}  # fmt: skip
    web = ChildProcess("bench-web", [sys.executable, "-m", "evalhub.webserver", "--host",
                       "127.0.0.1", "--port", str(port), "--workers", "1", "--log-level",
                       "warning"], env)  # fmt: skip

    def up() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code in (200, 503)
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=60, what="the web process")
    return web, base


def otel_of(base: str, node: str) -> dict | None:
    """What the worker `node` reported of its export with its last heartbeat."""
    health = httpx.get(f"{base}/healthz", timeout=10).json()
    return next((w.get("otel") for w in health["workers"] if w["worker"] == node), None)


def run_job(*, base: str, task_url: str, seeds: int, concurrency: int, delay: float,
            export: bool) -> dict:  # fmt: skip
    from django.contrib.auth import get_user_model

    from jobs import services
    from jobs.models import EvalJob, RolloutAttempt, SeedRun
    from tests.support.servers import ChildProcess, free_port, wait_until
    from traces.models import LLMCall

    nowhere = f"http://127.0.0.1:{free_port()}" if export else ""  # nobody listens there
    node = f"bench-otel-{uuid.uuid4().hex[:6]}@{os.uname().nodename}"
    env = {**os.environ, "EVALHUB_PUBLIC_URL": base, "EVALHUB_TRACES_ZIP_AFTER_S": "0.5",
           "OTEL_EXPORTER_OTLP_ENDPOINT": nowhere, "OTEL_EXPORTER_OTLP_TIMEOUT": "1000"}  # fmt: skip
    worker = ChildProcess("bench-worker", [
        sys.executable, "-m", "celery", "-A", "evalhub", "worker",
        "-Q", os.environ["EVALHUB_CELERY_QUEUE"], "-n", node, "--pool", "threads",
        "--concurrency", "8", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
        "--without-heartbeat"], env)  # fmt: skip
    try:
        wait_until(lambda: "ready" in worker.log() or worker.proc.poll() is not None,
                   timeout=60, what="the worker")  # fmt: skip
        time.sleep(1.0)  # "ready" is logged a moment before the consumer polls
        owner, _ = get_user_model().objects.get_or_create(username="bench")
        spec = services.JobSpec(
            task_app_url=task_url, seeds=list(range(seeds)), max_concurrent=concurrency,
            timeout=60, policy={"model": "gpt-4o-mini", "provider": "openai"},
            env_config={"call_llm": True, "delay_s": delay},
        )  # fmt: skip
        created = time.perf_counter()
        job = services.job_create(owner=owner, spec=spec)
        job = wait_until(lambda: EvalJob.objects.filter(pk=job.pk, status__in=["completed",
                         "failed", "cancelled"]).first(), timeout=3600, interval=0.1,
                         what="the job to end")  # fmt: skip
        wall = time.perf_counter() - created
        wait_until(lambda: EvalJob.objects.filter(pk=job.pk).exclude(traces_zip_name="").exists(),
                   timeout=600, interval=0.1, what="the job's zip")  # fmt: skip
        attempts = RolloutAttempt.objects.filter(seed_run__job=job)
        spans = (SeedRun.objects.filter(job=job).count() + attempts.count()
                 + LLMCall.objects.filter(attempt__in=attempts).count())  # fmt: skip
        if export:  # the heartbeat (every 2 s) brings the counts to /healthz

            def counted() -> dict | None:
                otel = otel_of(base, node)
                return otel if otel and otel["dropped"] + otel["exported"] >= spans else None

            otel = wait_until(counted, timeout=120, interval=0.5, what="the drops counted")
        else:
            time.sleep(2.5)
            otel = otel_of(base, node)  # nothing queued: nothing reported
        succeeded = SeedRun.objects.filter(job=job, status="succeeded").count()
        return {"export": export, "status": job.status, "succeeded": succeeded, "wall_s": wall,
                "run_s": (job.completed_at - job.started_at).total_seconds(), "spans": spans,
                "otel": otel}  # fmt: skip
    finally:
        worker.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-concurrent", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.05, help="task app seconds per rollout")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    data_dir = setup()
    from evalhub.fakeprovider import FakeOpenAI
    from tests.support.servers import serve_asgi
    from tests.support.task_app import task_app_create

    runs: list[dict] = []
    try:
        app, _ = task_app_create()
        with serve_asgi(FakeOpenAI()) as provider, serve_asgi(app) as task_url:
            web, base = web_start(f"{provider}/v1")
            try:
                for _ in range(args.rounds):
                    for export in (False, True):
                        run = run_job(base=base, task_url=task_url, seeds=args.seeds,
                                      concurrency=args.max_concurrent, delay=args.delay,
                                      export=export)  # fmt: skip
                        print(f"export {'to a closed port' if export else 'off'}: "
                              f"{run['succeeded']}/{args.seeds} succeeded, wall "
                              f"{run['wall_s']:.2f}s (run {run['run_s']:.2f}s), "
                              f"otel {run['otel']} of {run['spans']} spans", flush=True)  # fmt: skip
                        runs.append(run)
            finally:
                web.stop()
    finally:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(data_dir, ignore_errors=True)
    off = [r["wall_s"] for r in runs if not r["export"]]
    on = [r for r in runs if r["export"]]
    out = {"seeds": args.seeds, "concurrency": args.max_concurrent, "delay_s": args.delay,
           "runs": runs, "off_wall_s": statistics.median(off),
           "on_wall_s": statistics.median(r["wall_s"] for r in on),
           "spans": on[-1]["spans"], "otel": on[-1]["otel"]}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    ok = all(r["status"] == "completed" and r["succeeded"] == args.seeds for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
