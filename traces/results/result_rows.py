"""A job's result rows, one per sample (seed, repeat): `GET .../results`, the dashboard's seed
tables, each seed's trace document and the zip show the same row (`seed_result_row`); read a
chunk of seed runs at a time, each chunk's usage in one query (`traces.results.totals`). And
the figures made of every row (the summary, per-seed figures), kept by `jobs.figures` once the
job's rows are final."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jobs import figures as kept
from jobs import stats
from jobs.models import EvalJob, SeedRun
from jobs.scores import Scores, finite_or_none
from jobs.selectors import seed_run_pages
from traces.models import CallKind
from traces.results.rows import model_rows
from traces.results.rowtable import RowTable
from traces.results.summary import summarize, summary_and_seeds
from traces.results.totals import NO_USAGE, Usage, usage_by_seed_run_and_kind


def judge_fields(seed_run: SeedRun, judge: Usage | None) -> dict[str, Any]:
    """The verifier's columns of a result row: its verdict, what its judge spent, and how its
    calls were answered (`judge_replayed_calls`... as the policy's, docs/replay.md)."""
    return {
        "task_app_score": finite_or_none(seed_run.task_app_score),
        "judge_status": seed_run.judge_status or None,
        "verifier_justification": seed_run.verifier_justification,
        "verifier_error": seed_run.verifier_error,
        **(_judge_usage_fields(judge) if judge is not None else _NO_JUDGE_USAGE),
    }


def _judge_usage_fields(judge: Usage) -> dict[str, Any]:
    return {
        "judge_tokens": judge.total_tokens,
        "judge_cost_usd": judge.cost_usd,
        "judge_num_llm_calls": judge.num_llm_calls,
        **{f"judge_{name}": value for name, value in judge.replay.row_fields().items()},
    }


# The usage columns of a sample without calls (of its policy, of a judge), made once: most
# samples of a job without a verifier have no judge's call. Spread into each row, never changed.
_NO_USAGE = NO_USAGE.row_fields()
_NO_JUDGE_USAGE = _judge_usage_fields(NO_USAGE)


def seed_result_row(
    seed_run: SeedRun, usage: Usage | None, judge: Usage | None = None
) -> dict[str, Any]:
    """One seed's row of GET /results (also in its trace document and on the dashboard)."""
    scores = Scores.fields_of(seed_run)
    return {
        "seed": seed_run.seed,
        "repeat": seed_run.repeat,
        "status": seed_run.status,
        **scores,
        "reward": scores["score"],
        "outcome_objectives": outcome_objectives(seed_run),
        "latency_ms": seed_run.latency_ms,
        **(usage.row_fields() if usage is not None else _NO_USAGE),
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
# A seed run's fields that are not in its result row (its trace, its leases, its counts of
# failures and losses, where its judgement stands): not read. A job's summary reads every row.
_NOT_IN_A_ROW = ("task_trace", "job", "failures", "losses", "lease_owner", "lease_expires_at",
                 "not_before", "judge_lease_owner", "judge_lease_expires_at", "judge_token_hash",
                 "judged_at", "judged_rollout")  # fmt: skip


def result_rows(*, job: EvalJob) -> Iterator[dict[str, Any]]:
    """The job's result rows in seed order, RESULT_ROWS_CHUNK seed runs at a time."""
    for _, row in result_rows_keyed(job=job):
        yield row


def result_rows_keyed(
    *, job: EvalJob, after: tuple[int, int] | None = None, limit: int | None = None
) -> Iterator[tuple[tuple[int, int], dict[str, Any]]]:
    """((seed, repeat), row) in that order; `after` is the key of the last row already read
    (`jobs.selectors.seed_run_pages`), `limit` the most rows."""
    for chunk in seed_run_pages(
        SeedRun.objects.filter(job=job),
        size=RESULT_ROWS_CHUNK,
        read=lambda page: list(model_rows(page, exclude=_NOT_IN_A_ROW)),
        after=after,
        limit=limit,
    ):
        for sr, row in zip(chunk, seed_runs_rows(chunk), strict=True):
            yield (sr.seed, sr.repeat), row


def seed_runs_rows(seed_runs: list[SeedRun]) -> list[dict[str, Any]]:
    """The result rows of these seed runs, in their order (one query for their calls)."""
    usage = usage_by_seed_run_and_kind([sr.id for sr in seed_runs])
    policy, judge = CallKind.POLICY, CallKind.JUDGE
    return [seed_result_row(sr, usage.get((sr.id, policy)), usage.get((sr.id, judge)))
            for sr in seed_runs]  # fmt: skip
