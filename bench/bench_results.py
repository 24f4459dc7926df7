"""A 100,000-seed job (the API's maximum): how long its creation takes, and what `GET .../results`
costs the web process, whole (streamed) and page by page.

    .venv/bin/python bench/bench_results.py [--seeds 100000] [--page 1000] [--json out.json]

In a fresh data directory (SQLite), a real uvicorn web process: `POST /api/eval/jobs` with
`--seeds` seeds (timed: validation, the bulk insert of the seed runs, the commit), then every
seed is given a result (scores, metrics, one LLM call each) straight in the database, then
`GET .../results` is read whole and page by page (`?limit=--page&cursor=...`). Memory is the web
process's peak RSS (VmHWM) growth over what it had after start-up and one API call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from webprocess import start_web, vm_kib  # a sibling: run as bench/bench_results.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fill_results(job_id: str) -> None:
    """Every seed succeeded, with metrics and one LLM call: what a finished job holds."""
    from django.db import connection
    from django.utils import timezone

    from jobs.models import EvalJob, RolloutAttempt, SeedRun
    from traces.models import LLMCall

    now = timezone.now()
    SeedRun.objects.filter(job_id=job_id).update(
        status="succeeded", attempts=1, score=0.5, outcome_score=0.5, latency_ms=900.0,
        metrics={"outcome_reward": 0.5, "outcome_objectives": {"reward": 0.5}},
        started_at=now, finished_at=now,
    )  # fmt: skip
    ids = list(SeedRun.objects.filter(job_id=job_id).values_list("id", flat=True))
    for start in range(0, len(ids), 5000):
        attempts = RolloutAttempt.objects.bulk_create(
            RolloutAttempt(seed_run_id=i, number=1, run_id=f"run-{i}", token_hash=f"{i:064x}",
                           status="succeeded", started_at=now, finished_at=now)
            for i in ids[start : start + 5000]
        )  # fmt: skip
        LLMCall.objects.bulk_create(
            LLMCall(attempt=a, seq=1, model_requested="gpt-4o-mini", request={}, response={},
                    prompt_tokens=100, completion_tokens=20, total_tokens=120,
                    cost_usd=0.00003, http_status=200, started_at=now, latency_ms=300.0)
            for a in attempts
        )  # fmt: skip
    EvalJob.objects.filter(pk=job_id).update(status="completed", started_at=now, completed_at=now)
    connection.close()


def read_whole(base: str, headers: dict, job_id: str) -> tuple[float, int, int]:
    t = time.perf_counter()
    with httpx.stream("GET", f"{base}/api/eval/jobs/{job_id}/results", headers=headers,
                      timeout=600) as response:  # fmt: skip
        response.raise_for_status()
        body = response.read()
    elapsed = time.perf_counter() - t
    data = json.loads(body)
    return elapsed, len(data["results"]), len(body)


def read_pages(base: str, headers: dict, job_id: str, limit: int) -> tuple[float, int, list]:
    """(seconds for every page, rows, each page's seconds)."""
    rows, cursor, times = 0, None, []
    t = time.perf_counter()
    with httpx.Client(headers=headers, timeout=600) as client:
        while True:
            params = {"limit": limit, **({"cursor": cursor} if cursor else {})}
            t_page = time.perf_counter()
            response = client.get(f"{base}/api/eval/jobs/{job_id}/results", params=params)
            response.raise_for_status()
            times.append(time.perf_counter() - t_page)
            page = response.json()
            rows += len(page["results"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
    return time.perf_counter() - t, rows, times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=1000)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    os.environ.update(EVALHUB_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="evalhub.settings",
                      EVALHUB_CELERY_QUEUE="bench-results", LOG_LEVEL="WARNING")  # fmt: skip
    import django

    django.setup()
    from django.core.management import call_command

    from jobs.apikeys import api_key_create_for_username

    call_command("migrate", verbosity=0)
    _, key = api_key_create_for_username(username="bench")
    web, base = start_web()
    headers = {"Authorization": f"Bearer {key}"}
    out: dict = {"seeds": args.seeds}
    try:
        httpx.get(f"{base}/api/eval/jobs", headers=headers).raise_for_status()
        body = {"task_app_url": "http://127.0.0.1:9", "seeds": list(range(args.seeds)),
                "policy": {"model": "gpt-4o-mini"}, "max_concurrent": 8}  # fmt: skip
        t = time.perf_counter()
        response = httpx.post(f"{base}/api/eval/jobs", json=body, headers=headers, timeout=600)
        out["create_s"] = time.perf_counter() - t
        response.raise_for_status()
        job_id = response.json()["job_id"]
        print(f"POST of a {args.seeds}-seed job: {out['create_s']:.2f}s", flush=True)
        fill_results(job_id)
        base_kib = vm_kib(web.pid, "VmHWM")
        out["whole_s"], rows, size = read_whole(base, headers, job_id)
        out["whole_growth_mib"] = (vm_kib(web.pid, "VmHWM") - base_kib) / 1024
        print(f"GET results whole: {out['whole_s']:.2f}s, {rows} rows, {size / 2**20:.1f} MiB, "
              f"web peak RSS +{out['whole_growth_mib']:.0f} MiB", flush=True)  # fmt: skip
        base_kib = vm_kib(web.pid, "VmHWM")
        out["pages_s"], rows, pages = read_pages(base, headers, job_id, args.page)
        out["pages_growth_mib"] = (vm_kib(web.pid, "VmHWM") - base_kib) / 1024
        out["page_p50_s"], out["page_p99_s"] = pct(pages, 50), pct(pages, 99)
        out["slowest_page_s"] = max(pages)
        print(f"GET results by pages of {args.page}: {out['pages_s']:.2f}s for {rows} rows, "
              f"a page p50 {out['page_p50_s'] * 1000:.0f} ms, p99 {out['page_p99_s'] * 1000:.0f}"
              f" ms, slowest {out['slowest_page_s'] * 1000:.0f} ms", flush=True)  # fmt: skip
    finally:
        web.terminate()
        web.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
