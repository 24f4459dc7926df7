"""The agreement figures of jobs.agreement against cases worked by hand."""

from __future__ import annotations

import math

import pytest

from jobs.agreement import (
    Rated,
    agreement_figures,
    cohen_kappa,
    people_pass,
    people_score,
    wilson_interval,
)
from jobs.stats import Sample


def pairs(counts: dict[tuple[bool, bool], int]) -> list[tuple[bool, bool]]:
    return [pair for pair, n in counts.items() for _ in range(n)]


def test_kappa_of_the_textbook_table():
    # 50 samples: both pass 20, only a passes 5, only b passes 10, both fail 15.
    # p_o = 35/50 = 0.7; a passes 0.5, b 0.6: p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.4.
    # SE = sqrt(0.7*0.3 / (50 * 0.5^2)) = sqrt(0.0168) = 0.129615.
    kappa, se = cohen_kappa(
        pairs({(True, True): 20, (True, False): 5, (False, True): 10, (False, False): 15})
    )
    assert kappa == pytest.approx(0.4)
    assert se == pytest.approx(math.sqrt(0.0168))


def test_kappa_is_one_on_perfect_agreement_and_undefined_when_chance_agreement_is_one():
    assert cohen_kappa(pairs({(True, True): 3, (False, False): 2})) == (1.0, 0.0)
    assert cohen_kappa(pairs({(True, True): 4})) is None
    assert cohen_kappa([]) is None
    # Always disagreeing with balanced rates: p_o = 0, p_e = 0.5, kappa = -1.
    assert cohen_kappa(pairs({(True, False): 2, (False, True): 2}))[0] == pytest.approx(-1.0)


def test_wilson_interval_of_eight_in_ten():
    # centre (0.8 + 3.8416/20) / (1 + 3.8416/10) = 0.99208 / 1.38416 = 0.716738; half-width
    # 1.96 sqrt(0.016 + 3.8416/400) / 1.38416 = 1.96 * 0.160012 / 1.38416 = 0.226581.
    low, high = wilson_interval(8, 10)
    assert (low, high) == (pytest.approx(0.490157, abs=1e-5), pytest.approx(0.943319, abs=1e-5))
    assert wilson_interval(0, 0) is None
    assert wilson_interval(5, 5)[1] == 1.0


def test_people_say_what_most_of_them_said_and_nothing_on_a_tie():
    assert people_pass(["pass", "pass", "fail"]) is True
    assert people_pass(["fail", "unsure"]) is False
    assert people_pass(["pass", "fail"]) is None
    assert people_pass(["unsure"]) is None
    assert people_pass([]) is None


def rated(seed, status, score, judge=None, verdicts=(), people=()):
    return Rated(Sample(seed, 0, status, score), judge, tuple(verdicts), tuple(people))


def test_three_raters_on_six_samples_worked_by_hand():
    figures = agreement_figures(
        [
            rated(0, "succeeded", 1.0, 0.9, ["pass"], [1.0]),
            rated(1, "succeeded", 1.0, 0.2, ["fail"], [0.0]),
            rated(2, "failed", None, None, ["fail"]),  # the task app's value 0: fails
            rated(3, "succeeded", 0.0, 0.0, ["unsure"]),
            rated(4, "succeeded", 0.6, 0.8),
            rated(5, "pending", None, None, ["pass"]),  # not finished: not counted
        ],
        threshold=0.5,
    )
    assert figures["rated"] == {"task_app": 5, "judge": 4, "people": 3}
    pair = figures["pairs"]
    # task app / judge on seeds 0, 1, 3, 4: (T,T) (T,F) (F,F) (T,T): 3 of 4 agree; pass rates
    # 3/4 and 2/4, p_e = 0.5, kappa 0.5; |diff| 0.1, 0.8, 0, 0.2: mean 0.275.
    assert pair["task_app_judge"]["samples"] == 4
    assert pair["task_app_judge"]["agreement"] == 0.75
    assert pair["task_app_judge"]["kappa"] == pytest.approx(0.5)
    assert pair["task_app_judge"]["mean_abs_difference"] == pytest.approx(0.275)
    assert pair["task_app_judge"]["score_samples"] == 4
    # task app / people on seeds 0, 1, 2: (T,T) (T,F) (F,F): 2/3; rates 2/3 and 1/3,
    # p_e = 4/9, kappa (2/9)/(5/9) = 0.4; scores on seeds 0 and 1: |1-1|, |1-0|: 0.5.
    assert pair["task_app_people"]["agreement"] == pytest.approx(2 / 3)
    assert pair["task_app_people"]["kappa"] == pytest.approx(0.4)
    assert pair["task_app_people"]["mean_abs_difference"] == pytest.approx(0.5)
    assert pair["task_app_people"]["score_samples"] == 2
    # judge / people on seeds 0, 1: both agree, rates 1/2 each: kappa 1; |0.9-1|, |0.2-0|.
    assert pair["judge_people"]["samples"] == 2
    assert pair["judge_people"]["kappa"] == pytest.approx(1.0)
    assert pair["judge_people"]["kappa_ci95"] == [1.0, 1.0]
    assert pair["judge_people"]["mean_abs_difference"] == pytest.approx(0.15)
    low, high = pair["task_app_judge"]["agreement_ci95"]
    assert low < 0.75 < high


def test_no_labels_no_judge_leaves_the_pairs_empty_not_zero():
    figures = agreement_figures([rated(0, "succeeded", 1.0)], threshold=1.0)
    empty = figures["pairs"]["task_app_people"]
    assert empty["samples"] == 0 and empty["agreement"] is None and empty["kappa"] is None
    assert empty["mean_abs_difference"] is None and empty["agreement_ci95"] is None


def test_peoples_score_is_their_corrected_score_else_their_verdict():
    assert people_score(rated(0, "succeeded", 1.0, verdicts=["fail"], people=[0.2, 0.4])) == (
        pytest.approx(0.3)
    )
    assert people_score(rated(0, "succeeded", 0.0, verdicts=["pass"])) == 1.0
    assert people_score(rated(0, "failed", None, verdicts=["fail", "fail", "pass"])) == 0.0
    assert people_score(rated(0, "succeeded", 1.0, verdicts=["unsure"])) is None
    assert people_score(rated(0, "succeeded", 1.0)) is None
