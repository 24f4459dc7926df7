"""How long an ended rollout's URL still reaches the provider (and bills the job): a task app
that calls its own URL over and over right after answering (tests/support/late_caller.py),
`--seeds` rollouts through real web processes and a real worker.

    .venv/bin/python bench/bench_revocation.py [--seeds 400] [--max-concurrent 8] [--webs 2]
        [--backend sqlite|postgres] [--poll 0.5] [--json out.json]

`sqlite` is the embedded default (SQLite, the file-system broker; ends pushed by Unix
datagrams); `postgres` a PRIVATE PostgreSQL and Redis started for the run (pushed by Redis
pub/sub; bench/bench_workers.py's `setup`). The web processes also poll the database every
`--poll` seconds (EVALHUB_INTERCEPTOR_REVOCATION_POLL_S), the safety net. Each rollout's window
runs from its answer being sent (the worker cannot know the end before) to the last of its
late calls that reached the provider (0 when none did): its p50, p99 and max are printed, with
how many late calls were made and how many got through.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from bench_workers import private_backend, setup  # a sibling: run as bench/bench_revocation.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(*, seeds: int, max_concurrent: int, webs: int, poll_s: float) -> dict:
    from django.contrib.auth import get_user_model

    from evalhub.fakeprovider import FakeOpenAI
    from jobs import services
    from jobs.models import EvalJob
    from tests.support import servers
    from tests.support.late_caller import LateCaller, admitted, orm_rows, percentile

    fake = FakeOpenAI()
    children = []
    with servers.serve_asgi(fake) as provider:
        try:
            bases = []
            for _ in range(webs):
                web, base = servers.start_web(
                    OPENAI_BASE_URL=f"{provider}/v1", OPENAI_API_KEY="sk-bench",
                    EVALHUB_INTERCEPTOR_REVOCATION_POLL_S=str(poll_s),
                )  # fmt: skip
                children.append(web)
                bases.append(base)
            children.append(servers.start_worker(
                queue=os.environ["EVALHUB_CELERY_QUEUE"], concurrency=4, EVALHUB_PUBLIC_URL=bases[0],
            ))  # fmt: skip
            caller = LateCaller(bases=bases)
            with servers.serve_asgi(caller) as task_url:
                owner, _ = get_user_model().objects.get_or_create(username="bench")
                spec = services.JobSpec(
                    task_app_url=task_url, seeds=list(range(seeds)), max_concurrent=max_concurrent,
                    policy={"provider": "openai", "model": "gpt-4o-mini"}, timeout=60,
                )  # fmt: skip
                job = services.job_create(owner=owner, spec=spec)
                servers.wait_until(lambda: EvalJob.objects.get(pk=job.pk).is_terminal,
                                   timeout=3600, interval=0.2, what="the job to end")  # fmt: skip
                servers.wait_until(lambda: len(caller.finished) >= seeds, timeout=120,
                                   what="every rollout's late calls")  # fmt: skip
        finally:
            for child in children:
                child.stop()
    job.refresh_from_db()
    windows = list(
        caller.windows(fake.received, admitted(orm_rows(job.pk), fake.received)).values()
    )
    spans = [w.window_s * 1000 for w in windows]
    arrivals = [w.arrival_s * 1000 for w in windows]
    return {
        "status": job.status, "rollouts": len(windows), "webs": webs, "poll_s": poll_s,
        "late_calls": sum(w.made for w in windows),
        "late_calls_through": sum(w.through for w in windows),
        "rollouts_with_calls_through": sum(1 for w in windows if w.through),
        "window_ms": {"p50": percentile(spans, 50), "p99": percentile(spans, 99),
                      "max": max(spans)},
        "to_provider_ms": {"p50": percentile(arrivals, 50), "p99": percentile(arrivals, 99),
                           "max": max(arrivals)},
        "errors": caller.errors[:5],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--max-concurrent", type=int, default=8)
    parser.add_argument("--webs", type=int, default=2, help="web processes the calls go to")
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="sqlite")
    parser.add_argument("--poll", type=float, default=0.5, help="the web processes' poll, s")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    data_dir, _ = setup(args.backend)
    started = time.monotonic()
    try:
        out = run(seeds=args.seeds, max_concurrent=args.max_concurrent, webs=args.webs,
                  poll_s=args.poll)  # fmt: skip
    finally:
        from django.db import connections

        connections.close_all()
        if hasattr(private_backend, "stop"):
            private_backend.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    out["backend"] = args.backend
    window = out["window_ms"]
    print(f"{args.backend}: {out['rollouts']} rollouts ({out['status']}) in "
          f"{time.monotonic() - started:.0f}s; {out['late_calls_through']} of {out['late_calls']} "
          f"late calls reached the provider, from {out['rollouts_with_calls_through']} rollouts; "
          f"window p50 {window['p50']:.1f} ms, p99 {window['p99']:.1f} ms, max {window['max']:.1f} ms "
          f"(to the provider: p99 {out['to_provider_ms']['p99']:.1f} ms)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if out["status"] == "completed" and not out["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
