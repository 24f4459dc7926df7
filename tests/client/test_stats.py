"""The client's own statistics (client/evalhub_client/stats.py, plan.py): hand-worked cases
against published tables, and simulations: with the seeds `evalhub plan` asks for, a known
effect is detected at about the stated power."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from evalhub_client.plan import difference_sd, pilot_sd, plan_make, spread_of
from evalhub_client.stats import (
    beta_regularized,
    paired_bounds,
    paired_power,
    seeds_needed,
    t_cdf,
    t_quantile,
)


def test_t_distribution_matches_the_printed_tables():
    # Student's t table: t(0.975; 10) = 2.228, t(0.95; 5) = 2.015, t(0.995; 30) = 2.750.
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)
    assert t_quantile(0.95, 5) == pytest.approx(2.015048, abs=1e-6)
    assert t_quantile(0.995, 30) == pytest.approx(2.749996, abs=1e-6)
    assert t_quantile(0.025, 10) == pytest.approx(-2.228139, abs=1e-6)
    # With 1 degree of freedom t is Cauchy: P(T <= 1) = 3/4 exactly.
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)
    # I_x(1, 1) = x, and I_x(a, b) = 1 - I_(1-x)(b, a).
    assert beta_regularized(1, 1, 0.3) == pytest.approx(0.3)
    assert beta_regularized(2.5, 4, 0.2) == pytest.approx(1 - beta_regularized(4, 2.5, 0.8))


def test_paired_bounds_by_hand():
    # Differences 1..5: mean 3, sd sqrt(2.5) = 1.5811; t(0.95; 4) = 2.1318;
    # half-width 2.131847 * 1.581139 / sqrt(5) = 1.507443.
    bounds = paired_bounds([1.0, 2.0, 3.0, 4.0, 5.0], 0.05)
    assert (bounds.n, bounds.mean) == (5, 3.0)
    assert bounds.sd == pytest.approx(1.581139, abs=1e-6)
    assert (bounds.lower, bounds.upper) == (
        pytest.approx(1.492557, abs=1e-6), pytest.approx(4.507443, abs=1e-6)
    )  # fmt: skip
    assert paired_bounds([0.3], 0.05) is None


@pytest.mark.parametrize(
    ("effect", "needed", "power_there"),
    # Cohen's d (effect / sd) 1, 0.5, 0.2 at alpha 0.05 two-sided, power 0.8: the paired t
    # test's sample sizes and achieved powers as G*Power prints them.
    [(1.0, 10, 0.8031), (0.5, 34, 0.8078), (0.2, 199, 0.8020)],
)
def test_seeds_needed_matches_published_paired_t_sample_sizes(effect, needed, power_there):
    assert seeds_needed(effect=effect, sd=1.0, alpha=0.05, power=0.8) == needed
    assert paired_power(needed, effect=effect, sd=1.0, alpha=0.05) == pytest.approx(
        power_there, abs=5e-4
    )
    assert paired_power(needed - 1, effect=effect, sd=1.0, alpha=0.05) < 0.8
    # Only the ratio matters: scores in [0, 1] with sd 0.1 need as many seeds.
    assert seeds_needed(effect=effect / 10, sd=0.1, alpha=0.05, power=0.8) == needed


def test_no_effect_is_detected_at_the_level():
    assert paired_power(50, effect=0.0, sd=1.0, alpha=0.05) == pytest.approx(0.05, abs=1e-4)


def rejects(differences: list[float], alpha: float) -> bool:
    """The two-sided paired t test the plan sizes (what `evalhub compare` readers run)."""
    n = len(differences)
    sd = statistics.stdev(differences)
    if sd == 0:
        return statistics.fmean(differences) != 0
    t = statistics.fmean(differences) / (sd / math.sqrt(n))
    return abs(t) > t_quantile(1 - alpha / 2, n - 1)


def detection_rate(draw, n: int, *, trials: int, alpha: float = 0.05) -> float:
    return sum(rejects([draw() for _ in range(n)], alpha) for _ in range(trials)) / trials


def test_with_the_planned_seeds_a_normal_effect_is_detected_at_the_stated_power():
    rng = random.Random(1)
    n = seeds_needed(effect=0.3, sd=1.0, alpha=0.05, power=0.8)
    rate = detection_rate(lambda: rng.gauss(0.3, 1.0), n, trials=4000)
    # 4000 trials: the rate's standard error is 0.0063; 0.03 is about 5 of them.
    assert abs(rate - 0.8) < 0.03, (n, rate)


def seed_figures(means_samples: list[list[float]]) -> list[dict]:
    """Per-seed figures as `GET .../results` gives them: samples, mean, population std."""
    return [{"seed": i, "samples": len(v), "mean": statistics.fmean(v),
             "std": statistics.pstdev(v)} for i, v in enumerate(means_samples)]  # fmt: skip


def test_a_plan_from_a_jobs_seeds_detects_the_effect_at_its_power_with_repeats():
    """The plan's model end to end: seed difficulty shared by two agents (correlation rho),
    sample noise around each seed's mean. A base job of 400 seeds x 3 repeats is drawn, its
    per-seed figures planned from, and new pairs of jobs on the planned seeds and repeats
    simulated: the paired t test detects the effect about as often as the plan said."""
    rng = random.Random(7)
    tau, noise, rho, effect, r0 = 0.25, 0.3, 0.6, 0.06, 3

    def seed_pair() -> tuple[float, float]:
        shared = rng.gauss(0, tau * math.sqrt(rho))
        return (shared + rng.gauss(0, tau * math.sqrt(1 - rho)),
                shared + rng.gauss(0, tau * math.sqrt(1 - rho)))  # fmt: skip

    base = [
        [m + rng.gauss(0, noise) for _ in range(r0)] for m, _ in (seed_pair() for _ in range(400))
    ]
    spread = spread_of(seed_figures(base))
    assert spread.repeats == r0 and spread.within == pytest.approx(noise**2, rel=0.1)
    made = plan_make(spread, effect=effect, alpha=0.05, power=0.8, correlation=rho)
    for row in (r for r in made.rows if r.repeats in (1, 4)):

        def difference(repeats=row.repeats) -> float:
            """One seed's difference of means: each agent's r samples around its seed mean."""
            a, b = seed_pair()
            noises = [rng.gauss(0, noise) for _ in range(2 * repeats)]
            return b + effect - a + (sum(noises[:repeats]) - sum(noises[repeats:])) / repeats

        rate = detection_rate(difference, row.seeds, trials=600)
        # 600 trials: standard error 0.016; the plan's variance is estimated from one job too.
        assert abs(rate - 0.8) < 0.06, (row, rate)
    assert made.rows[0].seeds > made.rows[-1].seeds  # repeats trade seeds for samples
    assert made.recommended.repeats == 1  # ...but never save samples in all
    limited = plan_make(spread, effect=effect, alpha=0.05, power=0.8, correlation=rho,
                        max_seeds=made.rows[0].seeds - 1)  # fmt: skip
    assert limited.recommended.repeats == 2 and limited.recommended.seeds < made.rows[0].seeds
    assert plan_make(spread, effect=effect, alpha=0.05, power=0.8, correlation=rho,
                     max_seeds=5).recommended is None  # fmt: skip


def test_a_plan_measured_on_a_pilot_detects_a_pass_fail_effect_at_its_power():
    """Scores of 0 or 1, seeds of every difficulty, two agents that find the same seeds hard:
    the spread of the differences measured on a pilot pair of jobs sizes the comparison, and
    the effect (a 0.1 better chance on every seed) is detected at about the planned power."""
    rng = random.Random(11)

    def seed_difference() -> float:
        p = rng.betavariate(1.2, 1.2)
        q = min(1.0, p + 0.1)
        return float(rng.random() < q) - float(rng.random() < p)

    pilot = {"seeds": [{"delta": seed_difference()} for _ in range(500)]}
    sd = pilot_sd(pilot)
    base = seed_figures([[float(rng.random() < rng.betavariate(1.2, 1.2))] for _ in range(500)])
    made = plan_make(spread_of(base), effect=0.1, alpha=0.05, power=0.8, correlation=0.0,
                     measured_sd=sd)  # fmt: skip
    (row,) = made.rows  # no seed ran twice: only the base's own repeats can be planned
    assert row.sd == pytest.approx(sd)
    rate = detection_rate(seed_difference, row.seeds, trials=400)
    assert abs(rate - 0.8) < 0.07, (row, rate)


def test_difference_sd_by_hand():
    # Seeds [0, .3, .6] and [.6, .9, 1.2]: means .3 and .9, V = 0.18; each sample .3 from its
    # seed's mean or on it, w = (3 x 0.06 x 2) / (2 x 2) = 0.09; tau^2 = 0.18 - 0.09 / 3 = 0.15.
    spread = spread_of(seed_figures([[0.0, 0.3, 0.6], [0.6, 0.9, 1.2]]))
    assert (spread.repeats, spread.mean) == (3, pytest.approx(0.6))
    assert spread.within == pytest.approx(0.09) and spread.between == pytest.approx(0.18)
    # rho = 0.5: sd_d(r)^2 = 2 x 0.5 x 0.15 + 2 x 0.09 / r.
    for r, expected in [(1, 0.33), (3, 0.21), (9, 0.17)]:
        got = difference_sd(spread, repeats=r, correlation=0.5, measured_sd=None)
        assert got == pytest.approx(math.sqrt(expected))
    # Measured on a pilot at r0 = 3: sd 0.5, of which 2 x 0.09 / 3 = 0.06 is sample noise.
    got = difference_sd(spread, repeats=1, correlation=0.5, measured_sd=0.5)
    assert got == pytest.approx(math.sqrt(0.25 - 0.06 + 0.18))
    # No seed ran twice: only r0 = 1, rho read on single scores: 2 (1 - rho) V.
    single = spread_of(seed_figures([[0.0], [1.0], [1.0]]))
    assert single.within is None and single.between == pytest.approx(1 / 3)
    assert difference_sd(single, repeats=1, correlation=0.25, measured_sd=None) == pytest.approx(
        math.sqrt(2 * 0.75 / 3)
    )
