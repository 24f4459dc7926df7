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

from django.db.models import Avg, Count, FloatField, Q, Sum, Value
from django.db.models.functions import Coalesce, NullIf

from jobs import stats
from jobs.models import EvalJob, SeedRun, SeedStatus
from jobs.scores import Scores
from traces.models import BUDGET_EXCEEDED, ROLLOUT_LIMIT_EXCEEDED, ROLLOUT_LIMITS, CallKind, LLMCall


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
    #: The per-rollout limit (`rollout_limits`) that refused a call, if one did.
    rollout_limit: str | None = None

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
            "rollout_limit": self.rollout_limit,
        }


NO_USAGE = Usage()

_BUDGET_REFUSAL = Q(http_status=429, error__startswith=BUDGET_EXCEEDED)
_LIMIT_REFUSAL = Q(http_status=429, error__startswith=ROLLOUT_LIMIT_EXCEEDED)
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
    **{
        f"limit_{name}": Count("id", filter=_LIMIT_REFUSAL & Q(error__contains=f" {name}:"))
        for name in ROLLOUT_LIMITS
    },
}


def _usage(*, cost, unknown, calls, refused, **tokens) -> Usage:
    limits = [name for name in ROLLOUT_LIMITS if tokens.pop(f"limit_{name}", 0)]
    return Usage(
        **{name: int(value or 0) for name, value in tokens.items()},
        cost_usd=None if unknown else float(cost or 0.0),
        num_llm_calls=calls,
        budget_refusals=refused,
        rollout_limit=limits[0] if limits else None,
    )


def rollout_limit_of(call: LLMCall) -> str | None:
    """The per-rollout limit that refused this call, or None."""
    if call.http_status != 429 or not (call.error or "").startswith(ROLLOUT_LIMIT_EXCEEDED):
        return None
    return next((name for name in ROLLOUT_LIMITS if f" {name}:" in call.error), None)


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
        **{f"limit_{name}": sum(1 for c in calls if rollout_limit_of(c) == name)
           for name in ROLLOUT_LIMITS},
    )  # fmt: skip


def seed_usage(
    *, job: EvalJob, seed_run: SeedRun | None = None, kind: str = CallKind.POLICY
) -> dict[int, Usage]:
    """Usage per seed run id over every attempt (failed attempts too: their tokens were
    spent), for the whole job or one of its seed runs. Seed runs without calls are absent.
    The policy's calls, or with `kind="judge"` the verifier's (reported beside, never inside)."""
    calls = LLMCall.objects.filter(attempt__seed_run__job=job, kind=kind)
    if seed_run is not None:
        calls = calls.filter(attempt__seed_run=seed_run)
    rows = calls.values("attempt__seed_run_id").annotate(**_AGGREGATES).order_by()
    return {r.pop("attempt__seed_run_id"): _usage(**r) for r in rows}


def job_usage_many(*, job_ids: list[str]) -> dict[str, Usage]:
    """Usage of each of several jobs, in one query."""
    rows = (
        LLMCall.objects.filter(attempt__seed_run__job_id__in=job_ids, kind=CallKind.POLICY)
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
    """Mean score of each job as its summary counts it: over the finished samples, a failed one
    (or one without a score) counting 0 (absent: nothing finished yet)."""
    return dict(
        SeedRun.objects.filter(job_id__in=job_ids, status__in=FINISHED)
        .values_list("job_id")
        .annotate(mean=Avg(Coalesce("score", 0.0, output_field=FloatField())))
        .order_by()
    )


FINISHED = (SeedStatus.SUCCEEDED, SeedStatus.FAILED)


# --- result rows and the summary -------------------------------------------------------------


def judge_fields(seed_run: SeedRun, judge: Usage | None) -> dict[str, Any]:
    """The verifier's columns of a result row: its verdict and what its judge spent."""
    judge = judge or NO_USAGE
    return {
        "task_app_score": seed_run.task_app_score,
        "judge_status": seed_run.judge_status or None,
        "verifier_justification": seed_run.verifier_justification,
        "verifier_error": seed_run.verifier_error,
        "judge_tokens": judge.total_tokens,
        "judge_cost_usd": judge.cost_usd,
        "judge_num_llm_calls": judge.num_llm_calls,
    }


def seed_result_row(
    seed_run: SeedRun, usage: Usage | None, judge: Usage | None = None
) -> dict[str, Any]:
    """One seed's row of GET /results (also in its trace document and on the dashboard)."""
    return {
        "seed": seed_run.seed,
        "repeat": seed_run.repeat,
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
        **judge_fields(seed_run, judge),
        "reused": seed_run.reused_from_id is not None,
    }


def outcome_objectives(seed_run: SeedRun) -> dict[str, Any] | None:
    """The task app's `outcome_objectives` for the seed (kept with its reward object), or None."""
    metrics = seed_run.metrics if isinstance(seed_run.metrics, dict) else {}
    objectives = metrics.get("outcome_objectives")
    return objectives if isinstance(objectives, dict) else None


def job_results(*, job: EvalJob) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary, per-seed rows) of the job, computed from its seed runs and LLM calls."""
    rows = job_rows(job=job)
    return summarize(job=job, rows=rows), rows


def job_rows(*, job: EvalJob) -> list[dict[str, Any]]:
    """The job's result rows, one per sample, by seed and repeat."""
    return list(result_rows(job=job))


def job_figures(*, job: EvalJob, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """jobs.stats' figures of the job's result rows (per-seed figures under `seeds`)."""
    samples = (stats.Sample(r["seed"], r["repeat"], r["status"], r["score"]) for r in rows)
    return stats.job_figures(samples, repeats=job.repeats, threshold=job.pass_threshold)


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
    """((seed, repeat), row) in that order; `after` is the key of the last row already read
    (keyset pagination: a sample is unique by seed and repeat), `limit` the most rows."""
    seed_runs = SeedRun.objects.filter(job=job).defer("task_trace").order_by("seed", "repeat")
    left = limit
    while left is None or left > 0:
        page = seed_runs
        if after is not None:
            page = page.filter(Q(seed__gt=after[0]) | Q(seed=after[0], repeat__gt=after[1]))
        size = RESULT_ROWS_CHUNK if left is None else min(left, RESULT_ROWS_CHUNK)
        chunk = list(page[:size])
        if not chunk:
            return
        ids = [sr.id for sr in chunk]
        usage = _usage_of(seed_run_ids=ids, kind=CallKind.POLICY)
        judge = _usage_of(seed_run_ids=ids, kind=CallKind.JUDGE)
        for sr in chunk:
            yield (sr.seed, sr.repeat), seed_result_row(sr, usage.get(sr.id), judge.get(sr.id))
        after = (chunk[-1].seed, chunk[-1].repeat)
        if left is not None:
            left -= len(chunk)
        if len(chunk) < size:
            return


def _usage_of(*, seed_run_ids: list[int], kind: str) -> dict[int, Usage]:
    rows = (
        LLMCall.objects.filter(attempt__seed_run_id__in=seed_run_ids, kind=kind)
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


def summarize(
    *, job: EvalJob, rows: list[dict[str, Any]], figures: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The job's summary; `figures` when the caller computed `job_figures` of the rows already
    (its per-seed `seeds` are left out of the summary)."""
    succeeded = [r for r in rows if r["status"] == SeedStatus.SUCCEEDED]
    scores = [r["score"] for r in succeeded if r["score"] is not None]
    latencies = sorted(r["latency_ms"] for r in succeeded if r["latency_ms"] is not None)
    unknown_cost = sum(1 for r in rows if r["cost_unknown"])
    figures = dict(figures or job_figures(job=job, rows=rows))
    figures.pop("seeds")
    return {
        **figures,
        "mean_reward": figures["mean_score"],
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
        **judge_summary(rows),
    }


def judge_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The verifier's part of the summary: its verdicts and what its judges spent (apart from
    `total_tokens` / `total_cost_usd`, which are the policy's)."""
    judged = [r["verifier_score"] for r in rows if r.get("judge_status") == "done"]
    costs = [r["judge_cost_usd"] for r in rows]
    return {
        "mean_verifier_score": statistics.fmean(judged) if judged else None,
        "num_judged": len(judged),
        "num_verifier_errors": sum(1 for r in rows if r.get("judge_status") == "failed"),
        "judge_total_tokens": sum(r["judge_tokens"] for r in rows),
        "judge_total_cost_usd": None if any(c is None for c in costs) else round(sum(costs), 10),
    }


def job_usage_by_model(*, job: EvalJob) -> dict[str, Usage]:
    """Usage of the job's calls per model: the one that answered, else the one asked for."""
    model = Coalesce(
        NullIf("model_answered", Value("")), NullIf("model_requested", Value("")), Value("?")
    )
    rows = (
        LLMCall.objects.filter(attempt__seed_run__job=job)
        .annotate(model_name=model)
        .values("model_name")
        .annotate(**_AGGREGATES)
        .order_by()
    )
    return {r.pop("model_name"): _usage(**r) for r in rows}
