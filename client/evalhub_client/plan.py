"""`evalhub plan`: how many seeds (and repeats) a paired comparison needs to detect an effect,
sized from a finished job's per-seed figures (`seeds` of `GET .../results`: each seed's
finished samples, their mean and their population standard deviation).

The model: a sample's score is its seed's true mean plus noise. From the base job, V is the
variance of the seeds' means (each over the job's r0 repeats) and, when seeds ran more than
once, w the pooled variance of a sample around its seed's mean; the true seed means then vary by
tau^2 = V - w / r0. Two agents' true seed means correlate by rho (hard seeds are hard for both:
what pairing gains), so with r repeats each the difference of a seed's two means has variance

    sd_d(r)^2 = 2 (1 - rho) tau^2 + 2 w / r

(repeats shrink only the sample noise, not how differently two agents find a seed). When no
seed ran twice, w is unknown and only r = r0 = 1 is planned, rho read as the correlation of the
two agents' scores on a seed: sd_d^2 = 2 (1 - rho) V. With a pilot candidate, sd_d(r0) is
measured instead (the standard deviation of the shared seeds' differences) and its seed part,
sd_d(r0)^2 - 2 w / r0, carried to other r. The seeds needed are the fewest n whose two-sided
paired t test at alpha detects the effect with the power asked (stats.seeds_needed, exact
non-central t power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import fmean, stdev, variance
from typing import Any

from evalhub_client.errors import CliError, Exit
from evalhub_client.stats import paired_power, seeds_needed

REPEATS_SHOWN = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Spread:
    seeds: int
    repeats: int
    """r0: the base job's samples per seed (the most common count)."""
    mean: float
    between: float
    """V: the variance of the seeds' means."""
    within: float | None
    """w: a sample's variance around its seed's mean (None: no seed ran twice)."""


@dataclass(frozen=True)
class PlanRow:
    repeats: int
    sd: float
    seeds: int
    power: float


@dataclass(frozen=True)
class Plan:
    spread: Spread
    effect: float
    alpha: float
    power: float
    correlation: float | None
    """rho, or None when sd_d was measured against a pilot candidate."""
    measured_sd: float | None
    rows: list[PlanRow] = field(default_factory=list)
    max_seeds: int | None = None
    method: str = ("two-sided paired t test on shared seeds; seeds needed from its exact "
                   "power (non-central t)")  # fmt: skip

    @property
    def recommended(self) -> PlanRow | None:
        """The row with the fewest samples in all (more repeats never save samples: they shrink
        only the sample noise) among those within `max_seeds`; None when none fits."""
        fitting = [r for r in self.rows if self.max_seeds is None or r.seeds <= self.max_seeds]
        return min(fitting, key=lambda r: (r.seeds * r.repeats, r.repeats), default=None)


def spread_of(seeds: list[dict[str, Any]]) -> Spread:
    """V, w and r0 from the per-seed figures of a finished job."""
    seeds = [s for s in seeds if s.get("samples") and s.get("mean") is not None]
    if len(seeds) < 2:
        raise CliError(f"the base job has {len(seeds)} finished seeds: a plan needs at least 2",
                       Exit.INVALID)  # fmt: skip
    counts = [int(s["samples"]) for s in seeds]
    repeats = max(set(counts), key=counts.count)
    extra = sum(n - 1 for n in counts)
    within = (
        math.fsum(n * (s.get("std") or 0.0) ** 2 for n, s in zip(counts, seeds, strict=True)) / extra
        if extra else None
    )  # fmt: skip
    means = [float(s["mean"]) for s in seeds]
    return Spread(seeds=len(seeds), repeats=repeats, mean=fmean(means),
                  between=variance(means), within=within)  # fmt: skip


def difference_sd(spread: Spread, *, repeats: int, correlation: float | None,
                  measured_sd: float | None) -> float:  # fmt: skip
    """sd_d(r): the standard deviation of a seed's difference at `repeats` (the module's model)."""
    w = spread.within or 0.0
    if measured_sd is not None:
        seed_part = max(0.0, measured_sd**2 - 2 * w / spread.repeats)
    elif spread.within is None:
        seed_part = 2 * (1 - correlation) * spread.between
    else:
        seed_part = 2 * (1 - correlation) * max(0.0, spread.between - w / spread.repeats)
    return math.sqrt(seed_part + 2 * w / repeats)


def plan_make(spread: Spread, *, effect: float, alpha: float, power: float,
              correlation: float | None, measured_sd: float | None = None,
              max_seeds: int | None = None) -> Plan:  # fmt: skip
    choices = (
        sorted({spread.repeats, *REPEATS_SHOWN}) if spread.within is not None else [spread.repeats]
    )
    rows = []
    for r in choices:
        sd = difference_sd(spread, repeats=r, correlation=correlation, measured_sd=measured_sd)
        n = seeds_needed(effect=effect, sd=sd, alpha=alpha, power=power)
        rows.append(PlanRow(repeats=r, sd=sd, seeds=n,
                            power=paired_power(n, effect=effect, sd=sd, alpha=alpha)))  # fmt: skip
    return Plan(spread=spread, effect=effect, alpha=alpha, power=power,
                correlation=None if measured_sd is not None else correlation,
                measured_sd=measured_sd, rows=rows, max_seeds=max_seeds)  # fmt: skip


def pilot_sd(compare: dict[str, Any]) -> float:
    """sd_d measured: the standard deviation of the differences of the seeds both jobs ran."""
    differences = [s["delta"] for s in compare.get("seeds") or []]
    if len(differences) < 2:
        raise CliError(f"the pilot shares {len(differences)} seeds with the base: at least 2 "
                       "are needed to measure the differences' spread", Exit.INVALID)  # fmt: skip
    return stdev(differences)


def plan_body(plan: Plan) -> dict[str, Any]:
    s = plan.spread
    return {
        "method": plan.method,
        "effect": plan.effect,
        "alpha": plan.alpha,
        "power": plan.power,
        "correlation": plan.correlation,
        "measured_difference_sd": plan.measured_sd,
        "base": {
            "seeds": s.seeds,
            "repeats": s.repeats,
            "mean_score": s.mean,
            "seed_mean_variance": s.between,
            "within_seed_variance": s.within,
        },
        "rows": [_row_body(r) for r in plan.rows],
        "max_seeds": plan.max_seeds,
        "recommended": _row_body(plan.recommended) if plan.recommended else None,
    }


def _row_body(row: PlanRow) -> dict[str, Any]:
    return {"repeats": row.repeats, "difference_sd": row.sd, "seeds": row.seeds,
            "samples_per_job": row.seeds * row.repeats, "power": row.power}  # fmt: skip
