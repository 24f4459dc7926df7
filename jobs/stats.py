"""The figures of a job and of a comparison of two jobs, from per-sample scores alone: pure
Python, no database, a seeded RNG so the same samples always give the same figures.

Definitions (docs/figures.md says them too):
- a *sample* is one run of one seed (a job runs each seed `repeats` times); a finished sample
  is one that succeeded or failed (cancelled and pending ones are not counted);
- a sample's *value* is its score, and 0 when it failed or reported no score;
- a sample *passes* when it succeeded with a score >= the job's `pass_threshold`;
- `mean_score` is the mean value over the finished samples; `mean_score_scored` the mean over
  the samples that have a score;
- `pass@k` is, per seed with n finished samples of which c passed, 1 - C(n-c, k) / C(n, k) (the
  chance that at least one of k samples drawn without replacement passes), averaged over the
  seeds with n >= k; `pass^k` is C(c, k) / C(n, k) (all k pass), averaged the same way;
- the 95% interval of the mean is a percentile bootstrap over seeds (each seed's mean value).
"""

from __future__ import annotations

import math
import random
import statistics
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter
from typing import Any

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
# Beyond this many seeds the interval is the normal one, mean +- 1.96 s / sqrt(n): as good at
# that size, and the bootstrap would cost seconds on every read of a large job.
BOOTSTRAP_MAX_SEEDS = 200
# Sign-flip permutation test: exact up to this many seeds with a nonzero difference, else
# PERMUTATIONS random flips.
EXACT_PERMUTATION_MAX = 16
PERMUTATIONS = 10000
TIE = 1e-12


@dataclass(frozen=True)
class Sample:
    seed: int
    repeat: int
    status: str
    score: float | None

    def __post_init__(self) -> None:
        # A score that is not finite (NaN, an infinity) is a missing one, as
        # jobs.scores.finite_or_none reads it: none reaches a figure.
        if self.score is not None and not math.isfinite(self.score):
            object.__setattr__(self, "score", None)

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed")

    @property
    def value(self) -> float:
        """The sample's score, 0 for a failed sample or one without a score."""
        return self.score if self.status == "succeeded" and self.score is not None else 0.0

    def passes(self, threshold: float) -> bool:
        return self.status == "succeeded" and self.score is not None and self.score >= threshold


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one seed: n samples, c of them passed (Chen et al., 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one seed: the chance that k samples drawn without replacement all pass."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n; got n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


def bootstrap_mean_ci(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float] | None:
    """Percentile bootstrap 95% interval of the mean of `values` (None under two values); the
    normal interval beyond BOOTSTRAP_MAX_SEEDS values."""
    n = len(values)
    if n < 2:
        return None
    if n > BOOTSTRAP_MAX_SEEDS:
        mean = math.fsum(values) / n
        half = 1.96 * math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n)
        return mean - half, mean + half
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def sign_flip_p_value(differences: Sequence[float], *, seed: int = BOOTSTRAP_SEED) -> float | None:
    """Two-sided p-value of a paired sign-flip permutation test of mean difference 0: the share
    of sign assignments whose mean is at least as far from 0 as the observed one. Exact when few
    seeds differ, else Monte Carlo with PERMUTATIONS flips (counting the observed one)."""
    nonzero = [d for d in differences if abs(d) > TIE]
    if not differences:
        return None
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero)) - TIE
    if len(nonzero) <= EXACT_PERMUTATION_MAX:
        hits = 0
        for mask in range(2 ** len(nonzero)):
            total = sum(-d if mask >> i & 1 else d for i, d in enumerate(nonzero))
            hits += abs(total) >= observed
        return hits / 2 ** len(nonzero)
    rng = random.Random(seed)
    hits = sum(
        abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed
        for _ in range(PERMUTATIONS - 1)
    )
    return (hits + 1) / PERMUTATIONS


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def by_seed(samples: Iterable[Sample]) -> dict[int, list[Sample]]:
    """The finished samples of each seed that has one, seeds in order."""
    seeds: dict[int, list[Sample]] = {}
    for sample in sorted(samples, key=lambda s: (s.seed, s.repeat)):
        if sample.finished:
            seeds.setdefault(sample.seed, []).append(sample)
    return seeds


def seed_figures(samples: list[Sample], threshold: float) -> dict:
    """Per seed: its finished samples, their mean value and (population) std, and passes."""
    values = [s.value for s in samples]
    n = len(values)
    mean = math.fsum(values) / n if n else None
    # Plain arithmetic: statistics.pstdev is exact but far too slow for 100,000 seeds.
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n) if n else None
    return {"samples": n, "mean": mean, "std": std,
            "passes": sum(s.passes(threshold) for s in samples)}  # fmt: skip


def job_figures(samples: Iterable[Sample], *, repeats: int, threshold: float) -> dict:
    """The job's figures (see the module's docstring), and `seeds`: each seed's figures."""
    seeds: list[dict] = []
    ordered = sorted(samples, key=lambda s: (s.seed, s.repeat))
    figures = ordered_job_figures(
        ordered, repeats=repeats, threshold=threshold, on_seed=seeds.append
    )
    return {**figures, "seeds": seeds}


def ordered_job_figures(
    samples: Iterable[Sample], *, repeats: int, threshold: float, on_seed: Callable[[dict], Any]
) -> dict:
    """`job_figures` but `seeds`, of samples given in (seed, repeat) order and read once: each
    seed's figures go to `on_seed` as they are made, and only a few floats per seed are held
    (100,000 seeds' figures as dicts would take over 50 MiB)."""
    values, scored, means = array("d"), array("d"), array("d")
    counts: Counter[tuple[int, int]] = Counter()
    num_samples = 0
    for seed, group in groupby(samples, key=attrgetter("seed")):
        finished = []
        for sample in group:
            num_samples += 1
            if sample.finished:
                finished.append(sample)
        if not finished:
            continue
        figures = seed_figures(finished, threshold)
        values.extend(s.value for s in finished)
        scored.extend(s.score for s in finished if s.status == "succeeded" and s.score is not None)
        means.append(figures["mean"])
        counts[figures["samples"], figures["passes"]] += 1
        on_seed({"seed": seed, **figures})
    pass_at, pass_hat = {}, {}
    for k in range(1, max(1, repeats) + 1):
        eligible = [(nc, times) for nc, times in counts.items() if nc[0] >= k]
        seeds_k = sum(times for _, times in eligible)
        if seeds_k:
            pass_at[str(k)] = sum(pass_at_k(n, c, k) * t for (n, c), t in eligible) / seeds_k
            pass_hat[str(k)] = sum(pass_hat_k(n, c, k) * t for (n, c), t in eligible) / seeds_k
    interval = bootstrap_mean_ci(means.tolist())
    num_passed = sum(passes * times for (_, passes), times in counts.items())
    return {
        "mean_score": _mean(values),
        "mean_score_samples": len(values),
        "mean_score_scored": _mean(scored),
        "num_scored": len(scored),
        "num_samples": num_samples,
        "repeats": repeats,
        "pass_threshold": threshold,
        "num_passed": num_passed,
        "pass_rate": num_passed / len(values) if values else None,
        "pass_at_k": pass_at,
        "pass_hat_k": pass_hat,
        "mean_score_ci95": list(interval) if interval else None,
    }


def paired_outcome(delta: float) -> str:
    """A seed's difference as `paired_figures` counts it: a win, a loss or a tie."""
    if delta > TIE:
        return "win"
    return "loss" if delta < -TIE else "tie"


def paired_figures(base: dict[int, float], candidate: dict[int, float]) -> dict:
    """Compare two jobs on the seeds both ran (each seed's mean value): wins, losses, ties, the
    mean difference (candidate - base) with a paired bootstrap 95% interval over seeds and the
    sign-flip permutation test's p-value."""
    common = sorted(set(base) & set(candidate))
    deltas = [candidate[s] - base[s] for s in common]
    interval = bootstrap_mean_ci(deltas)
    outcomes = [paired_outcome(d) for d in deltas]
    return {
        "num_seeds": len(common),
        "wins": outcomes.count("win"),
        "losses": outcomes.count("loss"),
        "ties": outcomes.count("tie"),
        "mean_difference": statistics.fmean(deltas) if deltas else None,
        "mean_difference_ci95": list(interval) if interval else None,
        "p_value": sign_flip_p_value(deltas),
        "test": "paired sign-flip permutation test (two-sided)",
    }
