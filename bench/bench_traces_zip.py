"""Download the traces zip of a 10,000-seed job (5 LLM calls per seed) from a real uvicorn
process and report the serving process's peak memory (VmHWM) and the time taken.

    .venv/bin/python bench/bench_traces_zip.py [--seeds 10000] [--calls 5] [--storage local|s3] [--json out.json]

Runs in a throw-away data directory (SQLite, local files); `--storage s3` serves storage from an
S3-compatible server (moto) on a loopback port through the real S3Storage backend. First a
download with no member kept, which builds every document from the rows. Then what evalhub does:
the members built by the workers' task as seeds end, a download that assembles them, one read
from storage, and the zip assembled into storage by a worker as the job ends (each task timed in
a process of its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webprocess import start_web, vm_kib  # noqa: E402 - a sibling: run as bench/bench_traces_zip.py


def create_job(*, owner, seeds: int, calls: int):
    """A completed job of `seeds` seeds with `calls` LLM calls each (tool calls, reasoning,
    logprobs), written straight into the database."""

    from django.utils import timezone

    from evalhub import crypto
    from jobs.models import EvalJob, RolloutAttempt, SeedRun
    from tests.support.trace_rows import TASK_APP_KEY, _request, _response
    from traces.models import LLMCall

    now = timezone.now()
    job = EvalJob.objects.create(
        owner=owner, status="completed",
        task_app_url="http://127.0.0.1:9", task_app_api_key_encrypted=crypto.encrypt(TASK_APP_KEY),
        policy={"model": "gpt-4o-mini"}, num_seeds=seeds, num_samples=seeds,
        completed_at=now,
    )  # fmt: skip
    batch = 1000
    for start in range(0, seeds, batch):
        chunk = range(start, min(start + batch, seeds))
        runs = SeedRun.objects.bulk_create(
            SeedRun(
                job=job, seed=s, status="succeeded", attempts=1, score=1.0, outcome_score=1.0,
                latency_ms=900.0, metrics={"outcome_reward": 1.0, "details": {"answer": str(s)}},
                task_trace={"events": [{"type": "step", "reward": 1.0}]},
                started_at=now - timedelta(minutes=2), finished_at=now,
            )
            for s in chunk
        )  # fmt: skip
        attempts = RolloutAttempt.objects.bulk_create(
            RolloutAttempt(
                seed_run=r, number=1, run_id=f"run-{r.seed}-{secrets.token_hex(4)}",
                token_hash=hashlib.sha256(secrets.token_bytes(16)).hexdigest(),
                status="succeeded", http_status=200, started_at=now, finished_at=now,
                latency_ms=800.0,
            )
            for r in runs
        )  # fmt: skip
        LLMCall.objects.bulk_create(
            LLMCall(
                attempt=a, seq=q, model_requested="gpt-4o-mini",
                model_answered="gpt-4o-mini-2024-07-18",
                request=_request(a.seed_run.seed, q, "http://127.0.0.1/api/interceptor/v1/tok"),
                response=_response(a.seed_run.seed, q, q == calls),
                prompt_tokens=130, completion_tokens=30, total_tokens=160, cached_tokens=64,
                reasoning_tokens=12, cost_usd=0.00004, http_status=200, started_at=now,
                ttft_ms=80.0, latency_ms=400.0,
            )
            for a in attempts
            for q in range(1, calls + 1)
        )  # fmt: skip
    return job


# Run in a child process: a worker's task on the job, timed, with the process's peak RSS growth.
WORKER_TASK = """
import json, os, sys, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")
django.setup()
sys.path.insert(0, "bench")
from webprocess import vm_kib
%s
start = vm_kib(os.getpid(), "VmHWM")
t = time.monotonic()
task(sys.argv[1])
elapsed = time.monotonic() - t
print(json.dumps({"s": elapsed, "growth_mib": (vm_kib(os.getpid(), "VmHWM") - start) / 1024}))
"""

# The members of every ended seed, built as workers build them as seeds end (traces.zip.members).
# Not through the task itself: it builds only while a job has seeds left to claim, and this job
# has ended.
MEMBERS = """
from jobs.models import TERMINAL_SEED_STATUSES, EvalJob
from traces.redaction import job_redactor
from traces.zip.members import job_members


def task(job_id):
    job = EvalJob.objects.get(pk=job_id)
    for _ in job_members(job=job, statuses=TERMINAL_SEED_STATUSES, redactor=job_redactor(job=job)):
        pass
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--storage", choices=["local", "s3"], default="local")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    figures: dict = {"seeds": args.seeds, "calls": args.calls, "storage": args.storage}

    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    os.environ["EVALHUB_DATA_DIR"] = data_dir
    os.environ.pop("DATABASE_URL", None)
    moto = None
    if args.storage == "s3":
        import boto3
        from moto.server import ThreadedMotoServer

        from tests.support.servers import free_port

        port = free_port()
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        moto.start()
        os.environ.update(
            EVALHUB_S3_BUCKET="evalhub-bench", EVALHUB_S3_ENDPOINT_URL=f"http://127.0.0.1:{port}",
            EVALHUB_S3_REGION="us-east-1", AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
        )  # fmt: skip
        boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1"
        ).create_bucket(Bucket="evalhub-bench")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")
    import django

    django.setup()
    import logging

    import httpx
    from django.core.management import call_command

    from jobs.apikeys import api_key_create_for_username

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
    call_command("migrate", verbosity=0)
    api_key, key = api_key_create_for_username(username="bench")
    t0 = time.monotonic()
    job = create_job(owner=api_key.user, seeds=args.seeds, calls=args.calls)
    # Downloaded first, so the memory growth measured is the zip's, not the first imports'.
    warmup = create_job(owner=api_key.user, seeds=10, calls=args.calls)
    print(f"created {args.seeds} seeds x {args.calls} calls in {time.monotonic() - t0:.1f}s")

    web, base = start_web()
    try:
        headers = {"Authorization": f"Bearer {key}"}
        httpx.get(f"{base}/api/eval/jobs/{job.id}", headers=headers).raise_for_status()
        warm = httpx.get(f"{base}/api/eval/jobs/{warmup.id}/traces", headers=headers, timeout=60)
        warm.raise_for_status()
        start_kib = vm_kib(web.pid, "VmHWM")
        print(
            f"web process after start, one API call and a 10-seed zip: VmHWM {start_kib / 1024:.0f} MiB"
        )

        def download(key: str, label: str) -> None:
            out = Path(data_dir) / "download.zip"
            t = time.monotonic()
            with httpx.stream("GET", f"{base}/api/eval/jobs/{job.id}/traces", headers=headers,
                              timeout=600) as response, open(out, "wb") as f:  # fmt: skip
                response.raise_for_status()
                for chunk in response.iter_bytes():
                    f.write(chunk)
            elapsed = time.monotonic() - t
            with zipfile.ZipFile(out) as zf:
                entries = len(zf.namelist())
            growth = (vm_kib(web.pid, "VmHWM") - start_kib) / 1024
            figures[key] = {"s": elapsed, "seeds_per_s": args.seeds / elapsed,
                            "growth_mib": growth, "entries": entries}  # fmt: skip
            print(
                f"{label}: {elapsed:.2f}s ({args.seeds / elapsed:.0f} seeds/s), "
                f"{out.stat().st_size / 2**20:.1f} MiB zip, {entries} entries; web process peak "
                f"RSS (VmHWM) so far {vm_kib(web.pid, 'VmHWM') / 1024:.0f} MiB, RSS now "
                f"{vm_kib(web.pid, 'VmRSS') / 1024:.0f} MiB"
            )

        def forget_zip(members: bool) -> None:
            from traces.models import TraceMember
            from traces.zip.export import traces_zip_storage

            job.refresh_from_db()
            traces_zip_storage().delete(job.traces_zip_name)
            type(job).objects.filter(pk=job.pk).update(traces_zip_name="")
            if members:
                TraceMember.objects.filter(seed_run__job=job).delete()

        def in_worker(key: str, label: str, code: str) -> None:
            """The Celery task's own function on the job, timed in a process of its own."""
            done = subprocess.run(
                [sys.executable, "-c", code, job.id], cwd=ROOT, capture_output=True, text=True,
                env=dict(os.environ, EVALHUB_TRACES_ZIP_AFTER_S="0"), check=True,
            )  # fmt: skip
            figures[key] = json.loads(done.stdout.strip().splitlines()[-1])
            figures[key]["seeds_per_s"] = args.seeds / figures[key]["s"]
            print(f"{label}: {figures[key]['s']:.2f}s ({figures[key]['seeds_per_s']:.0f} seeds/s), "
                  f"its process grew by {figures[key]['growth_mib']:.0f} MiB")  # fmt: skip

        # With nothing kept: every document built from the rows, as the stream goes.
        download("build", "download with no member kept (built while streamed, then stored)")
        # What evalhub does: as the job runs, workers build the members of the seeds that
        # ended; as it ends, one assembles the zip into storage, which downloads then read.
        forget_zip(members=True)
        in_worker(
            "members",
            "members built by workers as the seeds end",
            WORKER_TASK % MEMBERS,
        )
        from traces.models import TraceMember

        figures["members"]["kept"] = TraceMember.objects.filter(seed_run__job=job).count()
        print(f"members kept: {figures['members']['kept']} of {args.seeds} seeds")
        download("assembled", "download of kept members (assembled while streamed, then stored)")
        download("stored", "download from storage")
        forget_zip(members=False)
        in_worker(
            "worker",
            "zip assembled by a worker as the job ends",
            WORKER_TASK % "from traces.tasks import job_traces_zip_build as task",
        )
        job.refresh_from_db()
        print(f"stored as {job.traces_zip_name!r} ({args.storage} storage)")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
    finally:
        web.terminate()
        web.wait(timeout=30)
        if moto is not None:
            moto.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
