"""`evalhub gate`: is the candidate worse than the base by more than the allowed drop?

The figures are the server's (`GET /api/eval/compare`): each seed both jobs ran, its two scores
(the seed's mean over its finished samples, a failed sample counting 0) and their difference.
Over those n differences the paired t bounds at 1 - alpha (one-sided, stats.paired_bounds)
decide:

- pass (exit 0): the lower bound is above -max_drop: with confidence 1 - alpha the candidate is
  not worse by more than max_drop (a non-inferiority test);
- worse (exit 1): the upper bound is below -max_drop: with the same confidence it is;
- too thin (exit 2): fewer than min_seeds shared seeds, or the interval holds -max_drop, so the
  seeds cannot tell; the verdict says about how many seeds would, if the difference held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from evalhub_client.errors import CliError, Exit
from evalhub_client.output import number
from evalhub_client.stats import PairedBounds, paired_bounds, t_quantile

TERMINAL = ("completed", "failed", "cancelled")
REGRESSIONS_SHOWN = 20
MOST_SEEDS = 10**7  # beyond, no run will settle it: said as none


@dataclass(frozen=True)
class Verdict:
    code: Exit
    """Exit.OK (pass), Exit.WORSE or Exit.THIN."""
    reason: str
    bounds: PairedBounds | None
    seeds_to_settle: int | None
    """With too thin evidence: about how many shared seeds would settle it."""


def jobs_over(compare: dict[str, Any]) -> None:
    for side in ("base", "candidate"):
        job = compare[side]
        if job.get("status") not in TERMINAL:
            raise CliError(
                f"{side} job {job.get('job_id')} is still {job.get('status')}: "
                f"wait for it (`evalhub watch {job.get('job_id')}`) and gate again",
                Exit.RUNNING,
            )


def gate_decide(
    compare: dict[str, Any], *, max_drop: float, alpha: float, min_seeds: int
) -> Verdict:
    differences = [s["delta"] for s in compare.get("seeds") or []]
    n = len(differences)
    bounds = paired_bounds(differences, alpha)
    if bounds is None or n < max(2, min_seeds):
        return Verdict(Exit.THIN, f"{n} shared seeds; at least {max(2, min_seeds)} are needed",
                       bounds, None)  # fmt: skip
    margin = -max_drop
    level = f"{100 * (1 - alpha):g}%"
    if bounds.lower > margin:
        reason = (f"the candidate is not worse by more than {max_drop:g}: its {level} lower "
                  f"bound {bounds.lower:+.4f} is above {margin:+g}")  # fmt: skip
        return Verdict(Exit.OK, reason, bounds, None)
    if bounds.upper < margin:
        reason = (f"the candidate is worse by more than {max_drop:g}: its {level} upper "
                  f"bound {bounds.upper:+.4f} is below {margin:+g}")  # fmt: skip
        return Verdict(Exit.WORSE, reason, bounds, None)
    reason = (f"the {level} bounds [{bounds.lower:+.4f}, {bounds.upper:+.4f}] hold "
              f"{margin:+g}: {n} seeds cannot tell")  # fmt: skip
    return Verdict(Exit.THIN, reason, bounds, _seeds_to_settle(bounds, margin, alpha))


def _seeds_to_settle(bounds: PairedBounds, margin: float, alpha: float) -> int | None:
    """The fewest n whose half-width t(1 - alpha, n - 1) s / sqrt(n) is under the distance from
    the mean to the margin: from the normal answer up, n = (t s / distance)^2 until it holds."""
    distance = abs(bounds.mean - margin)
    if distance < 1e-9 or bounds.sd == 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha)
    n = max(bounds.n, math.ceil((z * bounds.sd / distance) ** 2))
    while n <= MOST_SEEDS:
        needed = math.ceil((t_quantile(1 - alpha, n - 1) * bounds.sd / distance) ** 2)
        if needed <= n:
            return n
        n = needed
    return None


def _named(job: dict[str, Any]) -> str:
    return f"`{job['name']}` ({job['job_id']})" if job.get("name") else f"`{job['job_id']}`"


WORDS = {Exit.OK: "pass", Exit.WORSE: "worse", Exit.THIN: "thin"}
HEADLINES = {Exit.OK: "✅ pass", Exit.WORSE: "❌ worse", Exit.THIN: "⚠️ not enough evidence"}


def gate_markdown(
    compare: dict[str, Any], verdict: Verdict, *, max_drop: float, alpha: float, url: str = ""
) -> str:
    """The verdict and its figures as Markdown, fit for a pull request's comment."""
    base, cand = compare["base"], compare["candidate"]
    lines = [
        f"### evalhub gate: {HEADLINES[verdict.code]}",
        "",
        f"Candidate {_named(cand)} against base {_named(base)}: {verdict.reason}.",
        "",
        "| | base | candidate |",
        "|---|---|---|",
    ]
    for label, key, spec in (
        ("mean score", "mean_score", ".3f"), ("95% interval", "mean_score_ci95", ".3f"),
        ("pass rate", "pass_rate", ".3f"), ("samples", "num_samples", "d"),
        ("failed samples", "num_failed", "d"), ("cost (USD)", "total_cost_usd", "$"),
        ("status", "status", ""),
    ):  # fmt: skip
        lines.append(f"| {label} | {number(base.get(key), spec)} | {number(cand.get(key), spec)} |")
    lines += ["", *_paired_lines(compare, verdict, max_drop=max_drop, alpha=alpha)]
    if url:
        lines += ["", f"[Compare seed by seed]({url}/compare/?base={base['job_id']}"
                      f"&candidate={cand['job_id']})"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _paired_lines(compare: dict[str, Any], verdict: Verdict, *, max_drop: float,
                  alpha: float) -> list[str]:  # fmt: skip
    b = verdict.bounds
    lines = [
        f"- shared seeds: {compare.get('num_seeds')} (wins {compare.get('wins')}, losses "
        f"{compare.get('losses')}, ties {compare.get('ties')})",
        f"- mean difference (candidate − base): {number(compare.get('mean_difference'), '+.4f')}"
        f", 95% bootstrap interval {number(compare.get('mean_difference_ci95'), '+.4f')}, "
        f"p = {number(compare.get('p_value'), '.4g')} ({compare.get('test')})",
    ]
    if b is not None:
        lines.append(
            f"- gate: paired t, one-sided {100 * (1 - alpha):g}% bounds [{b.lower:+.4f}, "
            f"{b.upper:+.4f}] against the allowed drop {max_drop:g}"
        )
    if verdict.seeds_to_settle:
        lines.append(f"- about {verdict.seeds_to_settle} shared seeds would settle it "
                     "if the difference held")  # fmt: skip
    regressions = compare.get("regressions") or []
    if regressions:
        shown = ", ".join(str(s) for s in regressions[:REGRESSIONS_SHOWN])
        more = (
            f" and {len(regressions) - REGRESSIONS_SHOWN} more"
            if len(regressions) > REGRESSIONS_SHOWN
            else ""
        )
        lines.append(f"- regressions (the base passed, the candidate did not): seeds {shown}{more}")
    return lines
