"""A finished job's summary: the pass over every result row a job's end makes (and `GET
.../results` reads the same way), timed in CPU and wall seconds on a private PostgreSQL.

    .venv/bin/python bench/bench_summary.py [--samples 4000] [--rounds 5] [--code TREE]

A job of `--samples` samples, each succeeded with one policy LLM call (every fourth a judge's
call too), written straight in the database; then `job_summary` made `--rounds` times, its kept
figures dropped before each; the median and the best are printed. `--code TREE` imports
evalhub from another checkout (a commit before a change, `git worktree add`), to compare two
trees on the same machine in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--code", type=Path, help="the checkout to import evalhub from")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    from bench_workers import private_backend, setup  # a sibling: run as bench/bench_summary.py

    code = (args.code or ROOT).resolve()
    sys.path.insert(0, str(code))  # after the sibling's own ROOT
    os.chdir(code)  # Celery imports from the working directory first

    data_dir, _ = setup("postgres")
    try:
        figures = measure(samples=args.samples, rounds=args.rounds)
    finally:
        private_backend.stop()
    print(f"summary of {args.samples} samples: CPU median {figures['cpu_s_median']:.3f} s "
          f"(best {figures['cpu_s_best']:.3f}), wall median {figures['wall_s_median']:.3f} s "
          f"(best {figures['wall_s_best']:.3f})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


def measure(*, samples: int, rounds: int) -> dict[str, float]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from jobs import services
    from jobs.models import EvalJob, JobFigures, RolloutAttempt, SeedRun, SeedStatus
    from traces.models import CallKind, LLMCall

    try:
        from traces.results.result_rows import job_summary
    except ImportError:  # a tree from before traces.results.result_rows
        from traces.results.totals import job_summary

    import traces

    print(f"evalhub from {Path(traces.__file__).parents[1]}")
    owner = get_user_model().objects.create(username="bench")
    spec = services.JobSpec(task_app_url="http://127.0.0.1:9", seeds=list(range(samples)),
                            max_concurrent=256)  # fmt: skip
    job = services.job_create(owner=owner, spec=spec)
    services.job_start(job_id=job.id)
    now = timezone.now()
    SeedRun.objects.filter(job=job).update(
        status=SeedStatus.SUCCEEDED, score=1.0, reward_mean=1.0, outcome_score=1.0,
        latency_ms=50.0, metrics={"steps": 3}, started_at=now, finished_at=now, attempts=1,
    )  # fmt: skip
    seed_runs = list(SeedRun.objects.filter(job=job).order_by("id"))
    attempts = RolloutAttempt.objects.bulk_create(
        RolloutAttempt(
            seed_run=sr,
            number=1,
            run_id=f"r{sr.id}",
            token_hash=f"h{sr.id}",
            status="succeeded",
            started_at=now,
            finished_at=now,
        )
        for sr in seed_runs
    )
    calls = []
    for i, attempt in enumerate(attempts):
        kinds = [CallKind.POLICY] + ([CallKind.JUDGE] if i % 4 == 0 else [])
        for seq, kind in enumerate(kinds):
            calls.append(LLMCall(attempt=attempt, seq=seq, kind=kind, provider="openai",
                                 model_requested="gpt-4o-mini", prompt_tokens=100,
                                 completion_tokens=20, total_tokens=120, cost_usd=0.0001,
                                 http_status=200, latency_ms=400.0, started_at=now))  # fmt: skip
    LLMCall.objects.bulk_create(calls, batch_size=2000)
    job = EvalJob.objects.get(pk=job.id)
    cpu, wall = [], []
    for _ in range(rounds):
        JobFigures.objects.filter(job=job).delete()
        c0, w0 = time.process_time(), time.perf_counter()
        summary = job_summary(job)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    assert summary["num_successful"] == samples, summary
    return {"samples": samples, "cpu_s_median": statistics.median(cpu), "cpu_s_best": min(cpu),
            "wall_s_median": statistics.median(wall), "wall_s_best": min(wall)}  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
