"""How long the dashboard's pages take to render for a big job, on the embedded default.

    .venv/bin/python bench/dashboard_pages.py [--seeds 10000] [--repeat 5]

Builds a throwaway SQLite database in a temporary data directory: one job whose seeds all
finished, two LLM calls per seed (as the interceptor records them), then times each page
through Django's test client (server-side render time, no network, no browser): the median
wall and CPU time, and the first read's wall time (a job's figures are kept after the first
read: `jobs/figures.py`)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    os.environ.update(EVALHUB_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="evalhub.settings")
    os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone

    from jobs.apikeys import api_key_create
    from jobs.models import EvalJob, RolloutAttempt, SeedRun
    from traces.models import LLMCall

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(username="bench", password="x")
    now = timezone.now()
    ended = now - timedelta(hours=1)  # a job that ended a while ago: its rows are final
    job = EvalJob.objects.create(
        owner=user, task_app_url="http://127.0.0.1:9", status="completed", num_seeds=args.seeds,
        num_samples=args.seeds, policy={"model": "gpt-4o-mini"}, started_at=ended, completed_at=ended,
    )  # fmt: skip
    SeedRun.objects.bulk_create(
        SeedRun(job=job, seed=i, status="succeeded", score=(i % 10) / 10, latency_ms=1000 + i,
                attempts=1, metrics={"outcome_reward": (i % 10) / 10}, finished_at=now)
        for i in range(args.seeds)
    )  # fmt: skip
    runs = list(SeedRun.objects.filter(job=job).order_by("seed"))
    RolloutAttempt.objects.bulk_create(
        RolloutAttempt(seed_run=r, number=1, run_id=f"run-{r.seed}", token_hash=f"{r.seed:064d}",
                       status="succeeded", started_at=now, latency_ms=1000.0)
        for r in runs
    )  # fmt: skip
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    answer = {"choices": [{"message": {"role": "assistant", "content": "a"}}]}
    LLMCall.objects.bulk_create(
        LLMCall(attempt=a, seq=seq, request={"messages": msgs}, response=answer, total_tokens=300,
                prompt_tokens=250, completion_tokens=50, cost_usd=0.0002, started_at=now,
                latency_ms=400.0, ttft_ms=150.0)
        for a in RolloutAttempt.objects.filter(seed_run__job=job)
        for seq in (1, 2)
    )  # fmt: skip

    client = Client()
    client.force_login(user)
    pages = {
        "jobs list": "/",
        "job page": f"/jobs/{job.id}/",
        "job page sorted by -score": f"/jobs/{job.id}/?sort=-score",
        "job page, last page": f"/jobs/{job.id}/?page={-(-args.seeds // 100)}",
        "job page sorted by -cost_usd": f"/jobs/{job.id}/?sort=-cost_usd",
        "job progress.json": f"/jobs/{job.id}/progress.json",
        "jobs progress.json": f"/jobs/progress.json?ids={job.id}",
        "seed page": f"/jobs/{job.id}/seeds/7/",
        "seed page sorted by -score": f"/jobs/{job.id}/seeds/7/?sort=-score",
    }
    # The API's whole results document (summary, per-seed figures, every row).
    _, key = api_key_create(user=user, name="bench")
    api = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    pages["GET /results (whole)"] = f"/api/eval/jobs/{job.id}/results"
    print(f"{args.seeds} seeds, {2 * args.seeds} LLM calls, median of {args.repeat} (SQLite)")
    for name, url in pages.items():
        times, cpu = [], []
        for _ in range(args.repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.get(url, **(api if url.startswith("/api/") else {}))
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        print(
            f"  {name:30s} {statistics.median(times):8.1f} ms"
            f"  (CPU {statistics.median(cpu):8.1f} ms, first {times[0]:8.1f} ms)"
        )
    shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
