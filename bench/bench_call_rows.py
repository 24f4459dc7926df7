"""CPU time of the interceptor's record writer per LLM call: its row written ahead, the answer
read (usage, cost) and the row completed in place, as the writer threads do, in batches.

    DATABASE_URL=postgres://.../empty_db .venv/bin/python bench/bench_call_rows.py \\
        [--batch 1 8] [--calls 1600]

Runs against the database `DATABASE_URL` names (migrated first; without it, the settings'
default SQLite file), in this process, with the request and answer of
`bench/bench_interceptor.py`. CPU time, not wall time: robust to other load on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.bench_interceptor import MESSAGES  # noqa: E402
from evalhub.fakeprovider import completion  # noqa: E402
from jobs.models import EvalJob, RolloutAttempt, SeedRun  # noqa: E402
from traces.calls import recording  # noqa: E402

REQUEST = {"model": "gpt-4o-mini", "messages": MESSAGES}


def attempts(count: int) -> list[int]:
    owner = get_user_model().objects.create(username=f"bench-{uuid.uuid4().hex[:8]}")
    job = EvalJob.objects.create(owner=owner, task_app_url="http://x")
    return [
        RolloutAttempt.objects.create(
            seed_run=SeedRun.objects.create(job=job, seed=seed), number=1,
            run_id=uuid.uuid4().hex, token_hash=uuid.uuid4().hex, started_at=timezone.now(),
        ).id
        for seed in range(count)
    ]  # fmt: skip


def batch_write(attempt_ids: list[int], size: int, body: bytes) -> None:
    """One batch of `size` calls: written ahead, then completed."""
    records = [
        recording.CallRecord(
            attempt_id=attempt_ids[i % len(attempt_ids)], job_id="bench", provider="openai",
            price_provider="openai", request=REQUEST, started_at=timezone.now(),
            response_body=body, http_status=200, ttft_ms=1.0, latency_ms=3.0,
        )
        for i in range(size)
    ]  # fmt: skip
    rows = recording.llm_calls_ahead_save(
        calls=[recording.llm_call_ahead(record=r) for r in records]
    )
    for record, row in zip(records, rows, strict=True):
        record.row_id = row.pk
    recording.llm_calls_save(calls=[recording.llm_call_build(record=r) for r in records])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--calls", type=int, default=1600, help="calls per batch size")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    ids = attempts(8)
    body = json.dumps(completion(REQUEST)).encode()
    for size in args.batch:
        for _ in range(20):  # warm: statements cached, connection open
            batch_write(ids, size, body)
        rounds = max(1, args.calls // size)
        start = time.process_time()
        for _ in range(rounds):
            batch_write(ids, size, body)
        cpu_ms = (time.process_time() - start) * 1000 / (rounds * size)
        print(f"batch {size}: {cpu_ms:.3f} ms CPU per call (written ahead, read, completed)")


if __name__ == "__main__":
    main()
