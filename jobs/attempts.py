"""Rollout attempts: each POST /rollout of a seed, started with its own run id and token hash,
and how it ended. The worker's claims start them (jobs.claims.rollouts_claim) and its results
end them, in the same transactions as the seed runs' updates."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.utils import timezone

from evalhub import revocations
from jobs.bulk import rows_insert, rows_update
from jobs.models import AttemptStatus, RolloutAttempt


@dataclass(frozen=True)
class AttemptEnd:
    """How a rollout attempt ended; written with the seed's update, in one transaction."""

    attempt_id: int
    # When its POST began, which becomes its start: a seed claimed ahead waits at the runner's
    # gate after its claim (jobs.worker.rollouts `ahead`).
    posted_at: datetime
    status: str
    http_status: int | None = None
    error: str | None = None
    latency_ms: float | None = None


class Started(NamedTuple):
    """What a rollout needs of its attempt, started."""

    id: int
    number: int
    run_id: str


_STARTED_COLUMNS = ("seed_run", "worker", "number", "run_id", "token_hash", "status", "started_at")


def attempts_create(seed_runs, token_hashes: list[str], *, worker: str) -> list[Started]:
    """The running attempts numbered `attempts` of these seed runs (counted already), in the
    order given; a token hash each, from the first of `token_hashes`."""
    now = timezone.now()
    rows = [
        (seed_run.id, worker, seed_run.attempts, f"run-{secrets.token_hex(12)}", token_hash,
         AttemptStatus.RUNNING.value, now)
        for seed_run, token_hash in zip(seed_runs, token_hashes, strict=False)
    ]  # fmt: skip
    ids = rows_insert(RolloutAttempt, _STARTED_COLUMNS, rows)
    return [Started(i, row[2], row[3]) for i, row in zip(ids, rows, strict=True)]


def rollout_attempt_finish(*, end: AttemptEnd) -> bool:
    """`rollout_attempts_finish` of one attempt: whether it was still running."""
    return bool(rollout_attempts_finish(ends=[end]))


def rollout_attempts_finish(*, ends: list[AttemptEnd]) -> set[int]:
    """Record how the attempts ended: one statement, run for each. Their worker published
    the ends (evalhub.revocations) as it learnt them, before this write. Returns the ids of
    those that were still running: an attempt abandoned meanwhile (its lease ran out and a
    claim took its seed again, or its job was closed) keeps its end, and its result is not
    the seed's (`jobs.leases.seed_runs_finish`)."""
    now, ends = timezone.now(), sorted(ends, key=lambda end: end.attempt_id)  # locks in id order
    rows = rows_update(
        RolloutAttempt,
        [
            ({"id": end.attempt_id, "status": AttemptStatus.RUNNING},
             {"status": end.status, "http_status": end.http_status, "error": end.error,
              "latency_ms": end.latency_ms, "started_at": end.posted_at, "finished_at": now})
            for end in ends
        ],
        returning=("id",),
    )  # fmt: skip
    return {row[0] for row in rows}


def attempts_abandon(*, seed_run_ids: list[int], error: str) -> None:
    running = RolloutAttempt.objects.filter(
        seed_run_id__in=seed_run_ids, status=AttemptStatus.RUNNING
    )
    revocations.publish_on_commit(running.values_list("id", flat=True))
    running.update(status=AttemptStatus.ABANDONED, finished_at=timezone.now(), error=error)
