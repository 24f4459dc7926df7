"""A sample that made thousands of LLM calls: the time and memory to render its seed page and to
stream its trace document (GET .../seeds/{seed}), beside a small sample's in the same run.

    .venv/bin/python bench/bench_big_sample.py [--calls 5000] [--small 50] [--bytes 2048] [--json out.json]

Builds a throw-away SQLite database: two finished samples of one attempt each, `--calls` and
`--small` LLM calls of about `--bytes` each (tests/support/big_sample.py). Each figure is taken
in a fresh process of its own: the same work done once on the small sample first (imports,
templates), then timed on the sample measured, with the growth of the process's peak RSS
(VmHWM) and, done again under tracemalloc, the peak of Python's allocations. The seed page
shows the first 200 calls (frontend.selectors.SEED_PAGE_CALLS); the document is written a page
of calls at a time (traces.zip.seed_stream), its bytes counted and let go as a web process
sends them. For comparison, the document of the big sample built whole, as it was before, and
the sample's zip member as a worker assembling the zip builds it (`traces.zip.members`: past
500 calls, written a page of calls at a time into the deflater; once per sample, kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def django_setup(data_dir: str) -> None:
    os.environ.update(EVALHUB_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="evalhub.settings",
                      LOG_LEVEL="WARNING", EVALHUB_TRACES_ZIP_AFTER_S="0")  # fmt: skip
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()


def work(what: str, seed_run_id: int) -> int:
    """Do `what` on the sample once; the bytes it made."""
    from django.test import Client
    from rest_framework.renderers import JSONRenderer

    from jobs.models import SeedRun
    from traces.models import TraceMember
    from traces.redaction import job_redactor
    from traces.zip.documents import seed_trace
    from traces.zip.members import job_members
    from traces.zip.seed_stream import seed_trace_chunks

    seed_run = SeedRun.objects.select_related("job").get(pk=seed_run_id)
    job = seed_run.job
    if what == "page":
        client = Client()
        client.force_login(job.owner)
        response = client.get(f"/jobs/{job.id}/seeds/{seed_run.seed}/")
        assert response.status_code == 200, response.status_code
        return len(response.content)
    if what == "member":  # the zip's member, as the worker that assembles the zip builds it
        TraceMember.objects.filter(seed_run_id=seed_run_id).delete()
        # (job_members_build builds only while the job has seeds to claim: this one has none)
        for _ in job_members(job=job, statuses=[seed_run.status], redactor=job_redactor(job=job)):
            pass
        return TraceMember.objects.get(seed_run_id=seed_run_id).size
    redactor = job_redactor(job=job)
    if what == "document":
        return sum(len(piece) for piece in seed_trace_chunks(job=job, seed_run=seed_run,
                                                             redactor=redactor))  # fmt: skip
    row, document = seed_trace(job=job, seed_run=seed_run, redactor=redactor)  # built whole
    body = {"job_id": job.id, "seed": seed_run.seed, "repeat": seed_run.repeat, "result": row,
            "trace": document}  # fmt: skip
    return len(JSONRenderer().render(body))


def child(data_dir: str, what: str, warm_id: int, seed_run_id: int) -> dict:
    """In a fresh process: warm up on the small sample, then time and measure."""
    django_setup(data_dir)
    work(what, warm_id)
    before = vm_kib("VmHWM")
    started = time.perf_counter()
    size = work(what, seed_run_id)
    elapsed = time.perf_counter() - started
    growth = (vm_kib("VmHWM") - before) / 1024
    tracemalloc.start()
    work(what, seed_run_id)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"s": elapsed, "growth_mib": growth, "python_peak_mib": peak, "bytes": size}


def measure(data_dir: str, what: str, warm_id: int, seed_run_id: int) -> dict:
    argv = [sys.executable, __file__, "--child", data_dir, what, str(warm_id), str(seed_run_id)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--bytes", type=int, default=2048, help="about this much per call")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        data_dir, what, warm_id, seed_run_id = args.child
        print(json.dumps(child(data_dir, what, int(warm_id), int(seed_run_id))))
        return

    data_dir = tempfile.mkdtemp(prefix="evalhub-bench-")
    try:
        django_setup(data_dir)
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connections

        from tests.support.big_sample import big_sample_make

        call_command("migrate", verbosity=0)
        owner = get_user_model().objects.create_user(username="bench", password="x")
        small = big_sample_make(owner=owner, calls=args.small, body_bytes=args.bytes)
        big = big_sample_make(owner=owner, calls=args.calls, body_bytes=args.bytes)
        connections.close_all()
        figures: dict = {"calls": args.calls, "small": args.small, "bytes": args.bytes}
        for what in ("page", "document"):
            for name, sample in (("small", small), ("big", big)):
                figures[f"{what}_{name}"] = measure(data_dir, what, small.id, sample.id)
                f = figures[f"{what}_{name}"]
                print(f"{what}, {getattr(args, 'calls' if name == 'big' else 'small')} calls: "
                      f"{f['s'] * 1000:.0f} ms, +{f['growth_mib']:.1f} MiB RSS, "
                      f"{f['python_peak_mib']:.1f} MiB Python peak, {f['bytes']:,} bytes",
                      flush=True)  # fmt: skip
        for what, name in (("whole", "document_whole"), ("member", "member_big")):
            f = figures[name] = measure(data_dir, what, small.id, big.id)
            print(f"{name}, {args.calls} calls: {f['s'] * 1000:.0f} ms, "
                  f"+{f['growth_mib']:.1f} MiB RSS, {f['python_peak_mib']:.1f} MiB Python peak",
                  flush=True)  # fmt: skip
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
