"""Reads on eval jobs: lists, progress, summary and per-seed results, computed from the rows."""

from __future__ import annotations

import math
import statistics
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet, Sum

from jobs.models import EvalJob, JobEvent, SeedRun, SeedStatus
from traces.models import LLMCall
from traces.selectors import BUDGET_ERROR_PREFIX


def job_get_for_owner(*, owner: AbstractBaseUser, job_id: str) -> EvalJob | None:
    return EvalJob.objects.filter(owner=owner, pk=job_id).first()


def job_list(*, owner: AbstractBaseUser, status: str | None = None) -> QuerySet[EvalJob]:
    jobs = EvalJob.objects.filter(owner=owner)
    if status:
        jobs = jobs.filter(status=status)
    return jobs.order_by("-created_at", "-id")


def job_progress_many(*, jobs: list[EvalJob]) -> dict[str, dict[str, int]]:
    """Progress of each job, counted by the database in one query for all of them."""
    counts: dict[str, dict[str, int]] = {job.id: {} for job in jobs}
    for job_id, status, n in (
        SeedRun.objects.filter(job_id__in=list(counts))
        .values_list("job_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    ):
        counts[job_id][status] = n
    return {job.id: _progress(job=job, counts=counts[job.id]) for job in jobs}


def job_progress(*, job: EvalJob) -> dict[str, int]:
    return job_progress_many(jobs=[job])[job.id]


def _progress(*, job: EvalJob, counts: dict[str, int]) -> dict[str, int]:
    succeeded = counts.get(SeedStatus.SUCCEEDED, 0)
    failed = counts.get(SeedStatus.FAILED, 0)
    return {
        "completed": succeeded + failed,
        "total": job.num_seeds,
        "succeeded": succeeded,
        "failed": failed,
        "cancelled": counts.get(SeedStatus.CANCELLED, 0),
        "running": counts.get(SeedStatus.RUNNING, 0),
        "pending": counts.get(SeedStatus.PENDING, 0),
    }


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _is_budget_refusal(call: LLMCall) -> bool:
    return call.http_status == 429 and (call.error or "").startswith(BUDGET_ERROR_PREFIX)


# Per-seed usage, computed by the database: tokens and cost summed over every LLM call of every
# attempt (failed attempts included: their tokens were spent).
_USAGE_AGGREGATES = {
    "tokens": Sum("total_tokens"),
    "cost": Sum("cost_usd"),
    "unknown": Count("id", filter=Q(cost_unknown=True)),
    "calls": Count("id"),
    # Calls the interceptor refused because the job's budget was spent.
    "refused": Count("id", filter=Q(http_status=429, error__startswith=BUDGET_ERROR_PREFIX)),
}


def _usage(*, tokens, cost, unknown, calls, refused) -> dict[str, Any]:
    return {
        "tokens": int(tokens or 0),
        # Never a silent 0: one call of unknown price makes the seed's cost unknown.
        "cost_usd": None if unknown else float(cost or 0.0),
        "cost_unknown": bool(unknown),
        "num_llm_calls": calls,
        "budget_exceeded": bool(refused),
    }


def seed_usage(*, job: EvalJob, seed_run: SeedRun | None = None) -> dict[int, dict[str, Any]]:
    """Usage per seed run id, for the whole job or one of its seed runs."""
    calls = LLMCall.objects.filter(attempt__seed_run__job=job)
    if seed_run is not None:
        calls = calls.filter(attempt__seed_run=seed_run)
    rows = calls.values("attempt__seed_run_id").annotate(**_USAGE_AGGREGATES).order_by()
    return {r.pop("attempt__seed_run_id"): _usage(**r) for r in rows}


def usage_from_calls(calls: list[LLMCall]) -> dict[str, Any]:
    """The same figures as `seed_usage`, from calls already in memory."""
    return _usage(
        tokens=sum(c.total_tokens or 0 for c in calls),
        cost=sum(c.cost_usd or 0.0 for c in calls),
        unknown=sum(1 for c in calls if c.cost_unknown),
        calls=len(calls),
        refused=sum(1 for c in calls if _is_budget_refusal(c)),
    )


_NO_USAGE = usage_from_calls([])


def seed_result_row(seed_run: SeedRun, usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or _NO_USAGE
    return {
        "seed": seed_run.seed,
        "status": seed_run.status,
        "score": seed_run.score,
        "reward_mean": seed_run.reward_mean,
        "outcome_score": seed_run.outcome_score,
        "events_score": seed_run.events_score,
        "verifier_score": seed_run.verifier_score,
        "latency_ms": seed_run.latency_ms,
        "tokens": usage["tokens"],
        "cost_usd": usage["cost_usd"],
        "cost_unknown": usage["cost_unknown"],
        "num_llm_calls": usage["num_llm_calls"],
        "budget_exceeded": usage["budget_exceeded"],
        "attempts": seed_run.attempts,
        "error": seed_run.error,
        "started_at": seed_run.started_at,
        "finished_at": seed_run.finished_at,
    }


def job_results(*, job: EvalJob) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary, per-seed rows) of the job, computed from its seed runs and LLM calls."""
    usage = seed_usage(job=job)
    rows = [
        seed_result_row(sr, usage.get(sr.id))
        for sr in SeedRun.objects.filter(job=job).order_by("seed")
    ]
    return summarize(job=job, rows=rows), rows


def summarize(*, job: EvalJob, rows: list[dict[str, Any]]) -> dict[str, Any]:
    succeeded = [r for r in rows if r["status"] == SeedStatus.SUCCEEDED]
    scores = [r["score"] for r in succeeded if r["score"] is not None]
    latencies = sorted(r["latency_ms"] for r in succeeded if r["latency_ms"] is not None)
    unknown_cost = sum(1 for r in rows if r["cost_unknown"])
    mean_score = statistics.fmean(scores) if scores else None
    return {
        "mean_score": mean_score,
        "mean_reward": mean_score,
        "std_score": statistics.pstdev(scores) if len(scores) > 1 else (0.0 if scores else None),
        "min_score": min(scores) if scores else None,
        "max_score": max(scores) if scores else None,
        "total_tokens": sum(r["tokens"] for r in rows),
        # Never a silent 0: when a call's price is unknown the total is unknown too.
        "total_cost_usd": None
        if unknown_cost
        else round(sum(r["cost_usd"] or 0.0 for r in rows), 10),
        "seeds_with_unknown_cost": unknown_cost,
        "budget_exceeded": any(r["budget_exceeded"] for r in rows),
        "seeds_refused_by_budget": sum(1 for r in rows if r["budget_exceeded"]),
        "num_seeds": job.num_seeds,
        "num_successful": len(succeeded),
        "num_failed": sum(1 for r in rows if r["status"] == SeedStatus.FAILED),
        "num_cancelled": sum(1 for r in rows if r["status"] == SeedStatus.CANCELLED),
        "num_pending": sum(
            1 for r in rows if r["status"] in (SeedStatus.PENDING, SeedStatus.RUNNING)
        ),
        "latency_p50_ms": _percentile(latencies, 50),
        "latency_p95_ms": _percentile(latencies, 95),
    }


def job_events(*, job: EvalJob, since_seq: int = 0, limit: int = 200) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job=job, seq__gt=since_seq).order_by("seq")[:limit])


def seed_run_get(*, job: EvalJob, seed: int) -> SeedRun | None:
    return SeedRun.objects.filter(job=job, seed=seed).first()
