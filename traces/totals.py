"""Per-seed and per-job totals: tokens, cost, calls and budget refusals summed over the LLM
calls, the per-seed result rows and the job summary. The only place that sums LLM calls.

One rule holds everywhere: a cost that is unknown is never a silent 0. One call of a model
without a known price makes its seed's `cost_usd` null (`cost_unknown: true`), and one such seed
makes the job's `total_cost_usd` null. The interceptor's budget check is the exception by
design: it counts unknown prices as 0, since it can only refuse on what it knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Avg, Count, FloatField, Q, Sum, Value
from django.db.models.functions import Coalesce, NullIf

from jobs import figures as kept
from jobs import stats
from jobs.models import EvalJob, SeedRun, SeedStatus
from jobs.scores import Scores
from traces.models import BUDGET_EXCEEDED, ROLLOUT_LIMIT_EXCEEDED, ROLLOUT_LIMITS, CallKind, LLMCall
from traces.rows import model_rows
from traces.rowtable import RowTable
from traces.summary import summarize, summary_and_seeds


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
    if not calls:
        return NO_USAGE
    refusals = [c for c in calls if c.http_status == 429]  # the only ones a limit refused
    return _usage(
        **{name: sum(getattr(c, name) or 0 for c in calls) for name in _TOKEN_FIELDS},
        cost=sum(c.cost_usd or 0.0 for c in calls),
        unknown=sum(1 for c in calls if c.cost_unknown),
        calls=len(calls),
        refused=sum(1 for c in refusals if is_budget_refusal(c)),
        **{f"limit_{name}": sum(1 for c in refusals if rollout_limit_of(c) == name)
           for name in ROLLOUT_LIMITS},
    )  # fmt: skip


_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
                 "total_tokens")  # fmt: skip


def seed_usage(
    *, job: EvalJob, seed_run: SeedRun | None = None, kind: str = CallKind.POLICY
) -> dict[int, Usage]:
    """Usage per seed run id over every attempt (failed attempts too: their tokens were
    spent), for the whole job or one of its seed runs. Seed runs without calls are absent.
    The policy's calls, or with `kind="judge"` the verifier's (reported beside, never inside)."""
    calls = LLMCall.objects.filter(attempt__seed_run__job=job, kind=kind)
    if seed_run is not None:
        calls = calls.filter(attempt__seed_run=seed_run)
    return _per_seed_run(calls)


def _per_seed_run(calls) -> dict[int, Usage]:
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


def seed_run_usage_sql() -> dict[str, Any]:
    """Per seed run, as the database computes it (for sorting), the `tokens` and `cost_usd` of
    its result row: its policy calls' sums, 0 without calls, the cost null when one is unknown."""
    calls = LLMCall.objects.filter(attempt__seed_run=models.OuterRef("pk"), kind=CallKind.POLICY)
    calls = calls.values("attempt__seed_run").order_by()
    total, cost = (
        models.Subquery(calls.annotate(v=Sum(f)).values("v")) for f in ("total_tokens", "cost_usd")
    )
    known = Coalesce(cost, 0.0, output_field=FloatField())
    unknown = models.Exists(calls.filter(cost_unknown=True))
    return {"tokens": Coalesce(total, 0),
            "cost_usd": models.Case(models.When(unknown, then=None), default=known,
                                    output_field=FloatField())}  # fmt: skip


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
    rows = list(result_rows(job=job))
    return summarize(job=job, rows=rows), rows


def job_figures(*, job: EvalJob, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """jobs.stats' figures of the job's result rows (per-seed figures under `seeds`)."""
    samples = (stats.Sample(r["seed"], r["repeat"], r["status"], r["score"]) for r in rows)
    return stats.job_figures(samples, repeats=job.repeats, threshold=job.pass_threshold)


def job_summary(job: EvalJob) -> dict[str, Any]:
    """The job's summary, kept once its rows are final (`jobs.figures`)."""
    return kept_figures(job=job, names=("summary",))["summary"]


def kept_figures(
    *,
    job: EvalJob,
    names: tuple[str, ...],
    extra: Callable[[RowTable, dict], dict] | None = None,
    as_text: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Figures of all the job's rows, kept by `jobs.figures`: "summary", "seeds" (per-seed
    figures) or what `extra(rows, those two)` makes in the same pass. Rows are held as tuples
    meanwhile (a third of the memory of dicts): 100,000 seeds cost tens of MiB, not hundreds."""

    def compute() -> dict[str, Any]:
        if extra is None:  # one streaming pass: the rows are never held
            summary, seeds = summary_and_seeds(job=job, rows=result_rows(job=job))
            return {"summary": summary, "seeds": kept.JsonText(seeds)}
        rows = RowTable(result_rows(job=job))
        figures = job_figures(job=job, rows=rows)
        summary = summarize(job=job, rows=rows, figures=figures)
        base = {"summary": summary, "seeds": figures["seeds"]}
        return {**base, **extra(rows, base)}

    return kept.cached(job=job, names=names, compute=compute, as_text=as_text)


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
    seed_runs = SeedRun.objects.filter(job=job).order_by("seed", "repeat")
    left = limit
    while left is None or left > 0:
        page = seed_runs
        if after is not None:
            page = page.filter(Q(seed__gt=after[0]) | Q(seed=after[0], repeat__gt=after[1]))
        size = RESULT_ROWS_CHUNK if left is None else min(left, RESULT_ROWS_CHUNK)
        chunk = list(model_rows(page[:size], exclude=("task_trace",)))
        if not chunk:
            return
        for sr, row in zip(chunk, seed_runs_rows(chunk), strict=True):
            yield (sr.seed, sr.repeat), row
        after = (chunk[-1].seed, chunk[-1].repeat)
        if left is not None:
            left -= len(chunk)
        if len(chunk) < size:
            return


def seed_runs_rows(seed_runs: list[SeedRun]) -> list[dict[str, Any]]:
    """The result rows of these seed runs, in their order (two queries for their usage)."""
    calls = LLMCall.objects.filter(attempt__seed_run_id__in=[sr.id for sr in seed_runs])
    usage = _per_seed_run(calls.filter(kind=CallKind.POLICY))
    judge = _per_seed_run(calls.filter(kind=CallKind.JUDGE))
    return [seed_result_row(sr, usage.get(sr.id), judge.get(sr.id)) for sr in seed_runs]


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
