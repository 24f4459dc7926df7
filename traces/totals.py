"""Per-seed and per-job totals: tokens, cost, calls and budget refusals summed over the LLM
calls, the per-seed result rows and the job summary. The only place that sums LLM calls.

One rule holds everywhere: a cost that is unknown is never a silent 0. One call of a model
without a known price makes its seed's `cost_usd` null (`cost_unknown: true`), and one such seed
makes the job's `total_cost_usd` null. The interceptor's budget check is the exception by
design: it counts unknown prices as 0, since it can only refuse on what it knows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count, Q, Sum

from jobs.models import EvalJob, SeedRun, SeedStatus
from jobs.scores import Scores
from traces.models import BUDGET_EXCEEDED, LLMCall


@dataclass(frozen=True)
class Usage:
    """What a set of LLM calls spent."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Prompt tokens served from the provider's cache (part of prompt_tokens).
    cached_tokens: int = 0
    #: Completion tokens spent reasoning (part of completion_tokens).
    reasoning_tokens: int = 0
    total_tokens: int = 0
    #: USD; None when any call's price is unknown.
    cost_usd: float | None = 0.0
    num_llm_calls: int = 0
    #: Calls the interceptor refused because the job's budget was spent.
    budget_refusals: int = 0

    @property
    def cost_unknown(self) -> bool:
        return self.cost_usd is None

    def row_fields(self) -> dict[str, Any]:
        """The usage columns of a result row (GET /results, the dashboard, the zip)."""
        return {
            "tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
            "cost_unknown": self.cost_unknown,
            "num_llm_calls": self.num_llm_calls,
            "budget_exceeded": bool(self.budget_refusals),
        }


NO_USAGE = Usage()

_BUDGET_REFUSAL = Q(http_status=429, error__startswith=BUDGET_EXCEEDED)
# Summed by the database, per group of calls.
_AGGREGATES = {
    "prompt_tokens": Sum("prompt_tokens"),
    "completion_tokens": Sum("completion_tokens"),
    "cached_tokens": Sum("cached_tokens"),
    "reasoning_tokens": Sum("reasoning_tokens"),
    "total_tokens": Sum("total_tokens"),
    "cost": Sum("cost_usd"),
    "unknown": Count("id", filter=Q(cost_unknown=True)),
    "calls": Count("id"),
    "refused": Count("id", filter=_BUDGET_REFUSAL),
}


def _usage(*, cost, unknown, calls, refused, **tokens) -> Usage:
    return Usage(
        **{name: int(value or 0) for name, value in tokens.items()},
        cost_usd=None if unknown else float(cost or 0.0),
        num_llm_calls=calls,
        budget_refusals=refused,
    )


def is_budget_refusal(call: LLMCall) -> bool:
    return call.http_status == 429 and (call.error or "").startswith(BUDGET_EXCEEDED)


def usage_from_calls(calls: Iterable[LLMCall]) -> Usage:
    """The same figures the database sums in `seed_usage`, from calls already in memory."""
    calls = list(calls)
    return _usage(
        **{
            name: sum(getattr(c, name) or 0 for c in calls)
            for name in (
                "prompt_tokens",
                "completion_tokens",
                "cached_tokens",
                "reasoning_tokens",
                "total_tokens",
            )
        },  # fmt: skip
        cost=sum(c.cost_usd or 0.0 for c in calls),
        unknown=sum(1 for c in calls if c.cost_unknown),
        calls=len(calls),
        refused=sum(1 for c in calls if is_budget_refusal(c)),
    )


def seed_usage(*, job: EvalJob, seed_run: SeedRun | None = None) -> dict[int, Usage]:
    """Usage per seed run id over every attempt (failed attempts too: their tokens were
    spent), for the whole job or one of its seed runs. Seed runs without calls are absent."""
    calls = LLMCall.objects.filter(attempt__seed_run__job=job)
    if seed_run is not None:
        calls = calls.filter(attempt__seed_run=seed_run)
    rows = calls.values("attempt__seed_run_id").annotate(**_AGGREGATES).order_by()
    return {r.pop("attempt__seed_run_id"): _usage(**r) for r in rows}


def job_usage_many(*, job_ids: list[str]) -> dict[str, Usage]:
    """Usage of each of several jobs, in one query."""
    rows = (
        LLMCall.objects.filter(attempt__seed_run__job_id__in=job_ids)
        .values("attempt__seed_run__job_id")
        .annotate(**_AGGREGATES)
        .order_by()
    )
    found = {r.pop("attempt__seed_run__job_id"): _usage(**r) for r in rows}
    return {job_id: found.get(job_id, NO_USAGE) for job_id in job_ids}


def job_spent(*, job_id: str) -> tuple[float, int]:
    """(USD, tokens) recorded so far over every call of the job, for the interceptor's budget
    check: unknown prices count 0 here (see the module's docstring)."""
    totals = LLMCall.objects.filter(attempt__seed_run__job_id=job_id).aggregate(
        cost=Sum("cost_usd"), tokens=Sum("total_tokens")
    )
    return float(totals["cost"] or 0.0), int(totals["tokens"] or 0)


def job_mean_scores(*, job_ids: list[str]) -> dict[str, float]:
    """Mean score over the succeeded seeds of each job (absent: no scored seed yet)."""
    return dict(
        SeedRun.objects.filter(job_id__in=job_ids, status=SeedStatus.SUCCEEDED, score__isnull=False)
        .values_list("job_id")
        .annotate(mean=Avg("score"))
        .order_by()
    )


# --- result rows and the summary -------------------------------------------------------------


def seed_result_row(seed_run: SeedRun, usage: Usage | None) -> dict[str, Any]:
    """One seed's row of GET /results (also in its trace document and on the dashboard)."""
    return {
        "seed": seed_run.seed,
        "status": seed_run.status,
        **Scores.of(seed_run).as_fields(),
        "reward": seed_run.score,
        "outcome_objectives": outcome_objectives(seed_run),
        "latency_ms": seed_run.latency_ms,
        **(usage or NO_USAGE).row_fields(),
        "attempts": seed_run.attempts,
        "error": seed_run.error,
        "started_at": seed_run.started_at,
        "finished_at": seed_run.finished_at,
    }


def outcome_objectives(seed_run: SeedRun) -> dict[str, Any] | None:
    """The task app's `outcome_objectives` for the seed (kept with its reward object), or None."""
    metrics = seed_run.metrics if isinstance(seed_run.metrics, dict) else {}
    objectives = metrics.get("outcome_objectives")
    return objectives if isinstance(objectives, dict) else None


def job_results(*, job: EvalJob) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary, per-seed rows) of the job, computed from its seed runs and LLM calls."""
    rows = list(result_rows(job=job))
    return summarize(job=job, rows=rows), rows


def job_summary(job: EvalJob) -> dict[str, Any]:
    """The job's summary. Its rows are held as tuples while it is computed (a third of the
    memory of dicts): a 100,000-seed job's summary costs tens of MiB, not hundreds."""
    return summarize(job=job, rows=RowTable(result_rows(job=job)))


# Seed runs (with their usage) read per database round trip by `result_rows`.
RESULT_ROWS_CHUNK = 1000


def result_rows(*, job: EvalJob) -> Iterator[dict[str, Any]]:
    """The job's result rows in seed order, read RESULT_ROWS_CHUNK seed runs (and their
    usage) at a time, so memory does not grow with the job."""
    for _, row in result_rows_keyed(job=job):
        yield row


def result_rows_keyed(
    *, job: EvalJob, after: tuple[int, int] | None = None, limit: int | None = None
) -> Iterator[tuple[tuple[int, int], dict[str, Any]]]:
    """((seed, seed run id), row) in that order; `after` is the key of the last row already
    read (keyset pagination), `limit` the most rows."""
    seed_runs = SeedRun.objects.filter(job=job).defer("task_trace").order_by("seed", "id")
    left = limit
    while left is None or left > 0:
        page = seed_runs
        if after is not None:
            page = page.filter(Q(seed__gt=after[0]) | Q(seed=after[0], id__gt=after[1]))
        size = RESULT_ROWS_CHUNK if left is None else min(left, RESULT_ROWS_CHUNK)
        chunk = list(page[:size])
        if not chunk:
            return
        usage = _usage_of(seed_run_ids=[sr.id for sr in chunk])
        for sr in chunk:
            yield (sr.seed, sr.id), seed_result_row(sr, usage.get(sr.id))
        after = (chunk[-1].seed, chunk[-1].id)
        if left is not None:
            left -= len(chunk)
        if len(chunk) < size:
            return


def _usage_of(*, seed_run_ids: list[int]) -> dict[int, Usage]:
    rows = (
        LLMCall.objects.filter(attempt__seed_run_id__in=seed_run_ids)
        .values("attempt__seed_run_id")
        .annotate(**_AGGREGATES)
        .order_by()
    )
    return {r.pop("attempt__seed_run_id"): _usage(**r) for r in rows}


class RowTable(Sequence):
    """Result rows kept as tuples, read back as dicts: what `summarize` iterates over."""

    def __init__(self, rows: Iterable[dict[str, Any]]):
        self.keys: tuple[str, ...] = ()
        self.values: list[tuple] = []
        for row in rows:
            if not self.keys:
                self.keys = tuple(row)
            self.values.append(tuple(row.values()))

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [dict(zip(self.keys, v, strict=True)) for v in self.values[index]]
        return dict(zip(self.keys, self.values[index], strict=True))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        keys = self.keys
        for values in self.values:
            yield dict(zip(keys, values, strict=True))


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


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
