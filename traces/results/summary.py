"""A job's summary from its result rows: counts by status, the score figures of `jobs.stats`,
tokens and cost, latency percentiles, the verifier's verdicts and spending. Pure: the rows come
from `traces.results.result_rows`."""

from __future__ import annotations

import math
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from jobs import stats
from jobs.models import EvalJob, SeedStatus
from jobs.scores import finite_or_none


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class _Replays:
    """A replay's figures of the rows (docs/replay.md): the policy's, or with `prefix`
    "judge_" the judge's."""

    _NAMES = ("replayed_calls", "live_calls", "divergences")

    def __init__(self, prefix: str = "") -> None:
        self.calls: Counter[str] = Counter()
        self.costs, self.cost_unknown = array("d"), False
        # The rows' keys, made once: a summary adds every row twice (the policy, the judge).
        self._keys = tuple((name, f"{prefix}{name}") for name in self._NAMES)
        self._cost_key = f"{prefix}replayed_cost_usd"

    def add(self, row: dict[str, Any]) -> None:
        calls = self.calls
        for name, key in self._keys:
            calls[name] += row.get(key) or 0
        if (cost := row.get(self._cost_key, 0.0)) is None:
            self.cost_unknown = True
        else:
            self.costs.append(cost)

    def figures(self) -> dict[str, Any]:
        cost = None if self.cost_unknown else round(sum(self.costs), 10)
        return {**{key: self.calls[name] for name, key in self._keys}, self._cost_key: cost}


class _Tally:
    """What the summary needs of the result rows, gathered as they pass (a stream is never
    held): counts and sums, and as C doubles the few values per row that a percentile, a
    deviation or a sum in the rows' order needs."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.ok_scores, self.ok_latencies, self.costs = array("d"), array("d"), array("d")
        self.tokens = self.unknown_cost = self.refused = self.usage_unknown = 0
        self.judged, self.judge_costs = array("d"), array("d")
        self.judge_cost_missing = False
        self.verifier_errors = self.judge_tokens = 0
        self.replays, self.judge_replays = _Replays(), _Replays("judge_")

    def add(self, row: dict[str, Any]) -> stats.Sample:
        """Count the row in; its sample, for the score figures. A score that is not finite is
        missing (`finite_or_none`)."""
        status, score = row.get("status"), finite_or_none(row.get("score"))
        self.statuses[status] += 1
        if status == SeedStatus.SUCCEEDED:
            if score is not None:
                self.ok_scores.append(score)
            if (latency := row.get("latency_ms")) is not None:
                self.ok_latencies.append(latency)
        self.tokens += row.get("tokens")
        self.costs.append(row.get("cost_usd") or 0.0)
        self.unknown_cost += bool(row.get("cost_unknown"))
        self.usage_unknown += row.get("llm_calls_usage_unknown") or 0
        self.refused += bool(row.get("budget_exceeded"))
        self.replays.add(row)
        self.judge_replays.add(row)
        judge_status = row.get("judge_status")
        verifier_score = finite_or_none(row.get("verifier_score"))
        if judge_status == "done" and verifier_score is not None:
            self.judged.append(verifier_score)
        self.verifier_errors += judge_status == "failed"
        self.judge_tokens += row.get("judge_tokens")
        if (judge_cost := row.get("judge_cost_usd")) is None:
            self.judge_cost_missing = True
        else:
            self.judge_costs.append(judge_cost)
        return stats.Sample(row.get("seed"), row.get("repeat"), status, score)


def summarize(
    *, job: EvalJob, rows: Iterable[dict[str, Any]], figures: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The job's summary of its result rows (read once: a stream will do); `figures` when the
    caller computed `job_figures` of the rows already (its per-seed `seeds` are left out)."""
    tally = _Tally()
    if figures is None:
        samples = [tally.add(row) for row in rows]
        figures = stats.job_figures(samples, repeats=job.repeats, threshold=job.pass_threshold)
    else:
        for row in rows:
            tally.add(row)
    return _summary(job=job, tally=tally, figures=figures)


def summary_and_seeds(
    *, job: EvalJob, rows: Iterable[dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """(the summary, the per-seed figures as JSON text) of result rows in (seed, repeat) order,
    read once: neither the rows nor the per-seed figures are held as Python values."""
    tally = _Tally()
    seeds = bytearray()

    def seed_done(figures: dict[str, Any]) -> None:
        seeds.extend(b"," if seeds else b"[")
        seeds.extend(orjson.dumps(figures))

    samples = (tally.add(row) for row in rows)
    figures = stats.ordered_job_figures(
        samples, repeats=job.repeats, threshold=job.pass_threshold, on_seed=seed_done
    )
    seeds.extend(b"]" if seeds else b"[]")
    return _summary(job=job, tally=tally, figures=figures), seeds.decode()


def _summary(*, job: EvalJob, tally: _Tally, figures: dict[str, Any]) -> dict[str, Any]:
    scores, statuses, latencies = tally.ok_scores, tally.statuses, sorted(tally.ok_latencies)
    figures = {name: value for name, value in figures.items() if name != "seeds"}
    return {
        **figures,
        "mean_reward": figures["mean_score"],
        "std_score": statistics.pstdev(scores) if len(scores) > 1 else (0.0 if scores else None),
        "min_score": min(scores) if scores else None,
        "max_score": max(scores) if scores else None,
        "total_tokens": tally.tokens,
        "total_cost_usd": None if tally.unknown_cost else round(sum(tally.costs), 10),
        "seeds_with_unknown_cost": tally.unknown_cost,
        # Calls lost with their web process: their tokens are not in total_tokens, and their
        # seeds' cost is unknown (traces.results.totals).
        "llm_calls_usage_unknown": tally.usage_unknown,
        "budget_exceeded": bool(tally.refused),
        "seeds_refused_by_budget": tally.refused,
        "num_seeds": job.num_seeds,
        "num_successful": statuses[SeedStatus.SUCCEEDED],
        "num_failed": statuses[SeedStatus.FAILED],
        "num_cancelled": statuses[SeedStatus.CANCELLED],
        "num_pending": statuses[SeedStatus.PENDING] + statuses[SeedStatus.RUNNING],
        "latency_p50_ms": _percentile(latencies, 50),
        "latency_p95_ms": _percentile(latencies, 95),
        # A replay's calls (docs/replay.md): total_cost_usd counts the live ones only.
        **tally.replays.figures(),
        **_judge_figures(tally),
    }


def judge_summary(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The verifier's part of the summary: its verdicts and what its judges spent (apart from
    `total_tokens` / `total_cost_usd`, which are the policy's)."""
    tally = _Tally()
    for row in rows:
        tally.add(row)
    return _judge_figures(tally)


def _judge_figures(tally: _Tally) -> dict[str, Any]:
    judged = tally.judged
    return {
        "mean_verifier_score": statistics.fmean(judged) if judged else None,
        "num_judged": len(judged),
        "num_verifier_errors": tally.verifier_errors,
        "judge_total_tokens": tally.judge_tokens,
        "judge_total_cost_usd": None
        if tally.judge_cost_missing
        else round(sum(tally.judge_costs), 10),
        # The judge's replayed calls (docs/replay.md): judge_total_cost_usd counts the live ones.
        **tally.judge_replays.figures(),
    }


def with_people(summary: dict[str, Any], people: dict[str, Any]) -> dict[str, Any]:
    """The summary with what people made of the samples (`jobs.labels.job_people`: how many
    carry a label, the agreement of the task app, the judge and people, where the score figures
    come from). With people's figures (`reward_source` "human_else_task_app") those replace the
    job's, which stay as `job_mean_score` and `job_pass_rate`. Added as the summary is read,
    not kept with it: labels are made long after a job's rows are final."""
    own = {name: value for name, value in people.items() if name != "people_figures"}
    figures = people.get("people_figures")
    if figures is None:
        return {**summary, **own}
    # reward_source "human_else_task_app": the score figures are people's where they labelled.
    return {**summary, **own, **figures, "mean_reward": figures["mean_score"],
            "job_mean_score": summary["mean_score"], "job_pass_rate": summary["pass_rate"]}  # fmt: skip
