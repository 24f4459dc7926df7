"""A job's summary from its result rows: counts by status, the score figures of `jobs.stats`,
tokens and cost, latency percentiles, the verifier's verdicts and spending. Pure: the rows come
from `traces.totals`."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from jobs import stats
from jobs.models import EvalJob, SeedStatus


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


# The fields of the result rows the summary is computed from.
_SUMMARY_COLUMNS = ("seed", "repeat", "status", "score", "latency_ms", "tokens", "cost_usd",
                    "cost_unknown", "budget_exceeded", "judge_status", "verifier_score",
                    "judge_tokens", "judge_cost_usd")  # fmt: skip


def _columns(rows: Iterable[dict[str, Any]]) -> dict[str, list[Any]]:
    """The summary's fields of the rows, a list per field: the rows are read once, and only
    these values outlive it (a stream of rows is never held whole)."""
    columns: dict[str, list[Any]] = {name: [] for name in _SUMMARY_COLUMNS}
    appends = [(name, columns[name].append) for name in _SUMMARY_COLUMNS]
    for row in rows:
        for name, append in appends:
            append(row.get(name))
    return columns


def summarize(
    *, job: EvalJob, rows: Iterable[dict[str, Any]], figures: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The job's summary of its result rows (read once: a stream will do); `figures` when the
    caller computed `job_figures` of the rows already (its per-seed `seeds` are left out)."""
    c = _columns(rows)
    return _summary(job=job, c=c, figures=figures or _figures(job=job, c=c))


def summary_and_seeds(
    *, job: EvalJob, rows: Iterable[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the summary, the per-seed figures) of a stream of result rows, read once: only the
    summary's fields of each row are held meanwhile, never the rows."""
    c = _columns(rows)
    figures = _figures(job=job, c=c)
    return _summary(job=job, c=c, figures=figures), figures["seeds"]


def _figures(*, job: EvalJob, c: dict[str, list[Any]]) -> dict[str, Any]:
    samples = zip(c["seed"], c["repeat"], c["status"], c["score"], strict=True)
    return stats.job_figures(
        (stats.Sample(*sample) for sample in samples),
        repeats=job.repeats, threshold=job.pass_threshold,
    )  # fmt: skip


def _summary(*, job: EvalJob, c: dict[str, list[Any]], figures: dict[str, Any]) -> dict[str, Any]:
    ok = [i for i, status in enumerate(c["status"]) if status == SeedStatus.SUCCEEDED]
    scores = [c["score"][i] for i in ok if c["score"][i] is not None]
    latencies = sorted(c["latency_ms"][i] for i in ok if c["latency_ms"][i] is not None)
    unknown_cost = sum(1 for unknown in c["cost_unknown"] if unknown)
    figures = dict(figures)
    figures.pop("seeds")
    statuses = Counter(c["status"])
    return {
        **figures,
        "mean_reward": figures["mean_score"],
        "std_score": statistics.pstdev(scores) if len(scores) > 1 else (0.0 if scores else None),
        "min_score": min(scores) if scores else None,
        "max_score": max(scores) if scores else None,
        "total_tokens": sum(c["tokens"]),
        "total_cost_usd": None
        if unknown_cost
        else round(sum(cost or 0.0 for cost in c["cost_usd"]), 10),
        "seeds_with_unknown_cost": unknown_cost,
        "budget_exceeded": any(c["budget_exceeded"]),
        "seeds_refused_by_budget": sum(1 for refused in c["budget_exceeded"] if refused),
        "num_seeds": job.num_seeds,
        "num_successful": len(ok),
        "num_failed": statuses[SeedStatus.FAILED],
        "num_cancelled": statuses[SeedStatus.CANCELLED],
        "num_pending": statuses[SeedStatus.PENDING] + statuses[SeedStatus.RUNNING],
        "latency_p50_ms": _percentile(latencies, 50),
        "latency_p95_ms": _percentile(latencies, 95),
        **_judge_figures(c),
    }


def judge_summary(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The verifier's part of the summary: its verdicts and what its judges spent (apart from
    `total_tokens` / `total_cost_usd`, which are the policy's)."""
    return _judge_figures(_columns(rows))


def _judge_figures(c: dict[str, list[Any]]) -> dict[str, Any]:
    judged = [v for v, status in zip(c["verifier_score"], c["judge_status"], strict=True)
              if status == "done"]  # fmt: skip
    costs = c["judge_cost_usd"]
    return {
        "mean_verifier_score": statistics.fmean(judged) if judged else None,
        "num_judged": len(judged),
        "num_verifier_errors": sum(1 for status in c["judge_status"] if status == "failed"),
        "judge_total_tokens": sum(c["judge_tokens"]),
        "judge_total_cost_usd": None if None in costs else round(sum(costs), 10),
    }
