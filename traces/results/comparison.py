"""Two jobs side by side (GET /api/eval/compare and the dashboard's compare page): per seed
both jobs ran, the two scores (each seed's mean over its finished samples, a failed sample
counting 0, as in jobs.stats) and their difference, and what people said of it in each job
(`jobs.labels.job_seed_verdicts`); the paired figures; regressions (the base passed the seed,
the candidate did not) and improvements first; cost, tokens and latency."""

from __future__ import annotations

from typing import Any

from jobs import labels, stats
from jobs.models import EvalJob
from traces.results import result_rows

KIND_ORDER = {"regression": 0, "improvement": 1, "": 2}
SIDE_FIGURES = ("mean_score", "mean_score_ci95", "pass_rate", "pass_threshold", "num_samples",
                "num_failed", "total_cost_usd", "total_tokens", "latency_p50_ms",
                "latency_p95_ms", "repeats")  # fmt: skip


def _seed_means(job: EvalJob, rows: list[dict[str, Any]]) -> dict[int, float]:
    samples = (stats.Sample(r["seed"], r["repeat"], r["status"], r["score"]) for r in rows)
    return {
        seed: stats.seed_figures(group, job.pass_threshold)["mean"]
        for seed, group in stats.by_seed(samples).items()
    }


def _side(job: EvalJob, summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "name": job.name,
        "status": job.status,
        "model": (job.policy or {}).get("model"),
        **{name: summary.get(name) for name in SIDE_FIGURES},
    }


def seed_kind(base_passed: bool, candidate_passed: bool) -> str:
    if base_passed and not candidate_passed:
        return "regression"
    if candidate_passed and not base_passed:
        return "improvement"
    return ""


def seed_outcome(seed: dict[str, Any]) -> str:
    """What happened to a compared seed: its `kind` when it crossed the pass threshold
    (regression, improvement), else its paired outcome (win, loss, tie; `jobs.stats`)."""
    return seed["kind"] or stats.paired_outcome(seed["delta"])


def jobs_compare(*, base: EvalJob, candidate: EvalJob) -> dict[str, Any]:
    """The comparison of `candidate` against `base` (deltas are candidate - base)."""
    base_summary, base_rows = result_rows.job_results(job=base)
    cand_summary, cand_rows = result_rows.job_results(job=candidate)
    base_means, cand_means = _seed_means(base, base_rows), _seed_means(candidate, cand_rows)
    said = {"base": labels.job_seed_verdicts(job=base),
            "candidate": labels.job_seed_verdicts(job=candidate)}  # fmt: skip
    seeds = []
    for seed in sorted(set(base_means) & set(cand_means)):
        b, c = base_means[seed], cand_means[seed]
        b_pass, c_pass = b >= base.pass_threshold, c >= candidate.pass_threshold
        seeds.append({"seed": seed, "base_score": b, "candidate_score": c, "delta": c - b,
                      "base_passed": b_pass, "candidate_passed": c_pass,
                      "kind": seed_kind(b_pass, c_pass),
                      "base_label": said["base"].get(seed),
                      "candidate_label": said["candidate"].get(seed)})  # fmt: skip
    seeds.sort(key=lambda s: (KIND_ORDER[s["kind"]], s["delta"], s["seed"]))
    return {
        "base": _side(base, base_summary),
        "candidate": _side(candidate, cand_summary),
        **stats.paired_figures(base_means, cand_means),
        "regressions": [s["seed"] for s in seeds if s["kind"] == "regression"],
        "improvements": [s["seed"] for s in seeds if s["kind"] == "improvement"],
        "only_in_base": sorted(set(base_means) - set(cand_means)),
        "only_in_candidate": sorted(set(cand_means) - set(base_means)),
        "seeds": seeds,
    }
