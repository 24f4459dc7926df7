"""The figures, on cases computed by hand."""

from __future__ import annotations

import pytest

from jobs import stats
from jobs.stats import Sample, bootstrap_mean_ci, pass_at_k, pass_hat_k, sign_flip_p_value


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),  # c = 0: nothing ever passes
        (5, 0, 5, 0.0),
        (5, 5, 1, 1.0),  # c = n: everything passes
        (5, 5, 3, 1.0),
        (5, 2, 5, 1.0),  # k = n: all samples drawn, one passed
        (5, 2, 1, 2 / 5),  # pass@1 is the pass rate
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (4, 1, 3, 1 - 1 / 4),  # 1 - C(3,3)/C(4,3)
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(5, 0, 1, 0.0), (5, 5, 5, 1.0), (5, 2, 5, 0.0), (5, 3, 2, 3 / 10), (4, 4, 2, 1.0)],
)
def test_pass_hat_k_is_all_k_passing(n, c, k, expected):
    assert pass_hat_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def samples(scores: dict[int, list[float | None]]) -> list[Sample]:
    """None is a failed sample."""
    return [
        Sample(seed, r, "failed" if s is None else "succeeded", s)
        for seed, values in scores.items()
        for r, s in enumerate(values)
    ]


def test_job_figures_count_a_failed_sample_as_zero_and_say_how_many():
    figures = stats.job_figures(
        samples({0: [1.0, 0.0, 1.0], 1: [None, 0.5, 1.0], 2: [0.0, 0.0, 0.0]}),
        repeats=3,
        threshold=1.0,
    )
    assert figures["mean_score"] == pytest.approx(3.5 / 9)
    assert figures["mean_score_samples"] == 9 and figures["num_scored"] == 8
    assert figures["mean_score_scored"] == pytest.approx(3.5 / 8)
    assert figures["num_passed"] == 3 and figures["pass_rate"] == pytest.approx(3 / 9)
    # Seed 0: n=3 c=2; seed 1: n=3 c=1; seed 2: n=3 c=0.
    assert figures["pass_at_k"]["1"] == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
    assert figures["pass_at_k"]["2"] == pytest.approx((1 + (1 - 1 / 3) + 0) / 3)
    assert figures["pass_at_k"]["3"] == pytest.approx((1 + 1 + 0) / 3)
    assert figures["pass_hat_k"]["2"] == pytest.approx((1 / 3 + 0 + 0) / 3)
    assert figures["pass_hat_k"]["3"] == 0.0
    seed1 = figures["seeds"][1]
    assert seed1 == {"seed": 1, "samples": 3, "mean": 0.5, "std": pytest.approx(0.40824829),
                     "passes": 1}  # fmt: skip
    low, high = figures["mean_score_ci95"]
    assert low <= figures["mean_score"] <= high


def test_cancelled_samples_are_not_counted_and_pass_at_k_skips_seeds_with_too_few():
    figures = stats.job_figures(
        [Sample(0, 0, "succeeded", 1.0), Sample(0, 1, "cancelled", None),
         Sample(1, 0, "succeeded", 0.0), Sample(1, 1, "succeeded", 1.0)],
        repeats=2, threshold=1.0,
    )  # fmt: skip
    assert figures["mean_score_samples"] == 3 and figures["num_samples"] == 4
    assert figures["pass_at_k"] == {"1": pytest.approx((1 + 0.5) / 2), "2": 1.0}


def test_the_bootstrap_interval_is_seeded_and_none_for_one_seed():
    values = [0.1, 0.9, 0.4, 0.6, 0.5]
    assert bootstrap_mean_ci(values) == bootstrap_mean_ci(values)
    low, high = bootstrap_mean_ci(values)
    assert 0.1 <= low < 0.5 < high <= 0.9
    assert bootstrap_mean_ci([0.5]) is None
    wide = bootstrap_mean_ci([float(i % 2) for i in range(1000)])  # the normal interval
    assert wide == pytest.approx(
        (0.5 - 1.96 * 0.50025 / 1000**0.5, 0.5 + 1.96 * 0.50025 / 1000**0.5), rel=1e-3
    )


def test_sign_flip_p_values_on_hand_counted_cases():
    # Three equal gains: of 8 sign assignments, only all-plus and all-minus are as extreme.
    assert sign_flip_p_value([0.2, 0.2, 0.2]) == pytest.approx(2 / 8)
    assert sign_flip_p_value([0.0, 0.0]) == 1.0
    assert sign_flip_p_value([]) is None
    # +1, -1: every assignment is at least as extreme as |0|.
    assert sign_flip_p_value([1.0, -1.0]) == 1.0
    many = sign_flip_p_value([0.1] * 30)
    assert many == pytest.approx(1 / stats.PERMUTATIONS)


def test_paired_figures_on_the_common_seeds():
    figures = stats.paired_figures({0: 0.5, 1: 1.0, 2: 0.2, 9: 1.0}, {0: 0.7, 1: 0.0, 2: 0.2})
    assert figures["num_seeds"] == 3
    assert (figures["wins"], figures["losses"], figures["ties"]) == (1, 1, 1)
    assert figures["mean_difference"] == pytest.approx((0.2 - 1.0 + 0) / 3)
    assert figures["p_value"] == pytest.approx(1.0)
