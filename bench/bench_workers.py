"""How fast one worker runs a big job: a 2,000-seed job against a fast task app.

    .venv/bin/python bench/bench_workers.py [--seeds 2000] [--max-concurrent 64] [--delay 0]

Everything is real and local, in a fresh data directory: SQLite, the file-system broker, one
Celery worker process (`--pool threads`), a FastAPI task app on a loopback port answering each
rollout after `--delay` seconds. Prints the wall time of the job (first claim to completion, and
creation to completion) and the rollouts per second the worker sustained.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.0, help="task app seconds per rollout")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    os.environ.update(
        EVALHUB_DATA_DIR=data_dir,
        DJANGO_SETTINGS_MODULE="evalhub.settings",
        EVALHUB_CELERY_QUEUE="bench",
        LOG_LEVEL="WARNING",
    )
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from jobs import services
    from jobs.models import EvalJob, SeedRun
    from tests.support.servers import ChildProcess, serve_asgi, wait_until
    from tests.support.task_app import task_app_create

    call_command("migrate", verbosity=0)
    app, state = task_app_create(delay_s=args.delay)
    with serve_asgi(app) as task_url:
        worker = ChildProcess(
            "bench-worker",
            [sys.executable, "-m", "celery", "-A", "evalhub", "worker", "-Q", "bench",
             "--pool", "threads", "--concurrency", "2", "--loglevel", "INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            dict(os.environ),
        )  # fmt: skip
        try:
            wait_until(lambda: "ready" in worker.log() or worker.proc.poll() is not None,
                       timeout=60, what="the worker")  # fmt: skip
            time.sleep(1.0)  # "ready" is logged a moment before the consumer polls
            owner, _ = get_user_model().objects.get_or_create(username="bench")
            spec = services.JobSpec(
                task_app_url=task_url, seeds=list(range(args.seeds)),
                max_concurrent=args.max_concurrent, timeout=60,
            )  # fmt: skip
            created = time.perf_counter()
            job = services.job_create(owner=owner, spec=spec)

            def over():
                row = EvalJob.objects.get(pk=job.pk)
                return row if row.is_terminal else None

            job = wait_until(over, timeout=3600, interval=0.2, what="the job to end")
            wall = time.perf_counter() - created
        finally:
            worker.stop()
    succeeded = SeedRun.objects.filter(job=job, status="succeeded").count()
    run_s = (job.completed_at - job.started_at).total_seconds()
    print(f"seeds={args.seeds} max_concurrent={args.max_concurrent} task_app_delay={args.delay}s")
    print(
        f"job status={job.status} succeeded={succeeded} task app max in flight={state.max_in_flight}"
    )
    print(f"wall time (created -> completed): {wall:.2f} s")
    print(f"run time (started -> completed): {run_s:.2f} s")
    print(f"rollouts/s (one worker): {succeeded / run_s:.1f}")
    shutil.rmtree(data_dir, ignore_errors=True)
    return 0 if job.status == "completed" and succeeded == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())
