"""The job page's SVG charts: bins of the score histogram, bars of the cost chart."""

from __future__ import annotations

from frontend import charts


def row(seed, score=None, cost=None, status="succeeded"):
    return {"seed": seed, "score": score, "cost_usd": cost, "status": status}


def test_scores_between_0_and_1_fall_into_ten_bins_over_that_range():
    chart = charts.score_histogram(rows=[row(0, 0.0), row(1, 0.05), row(2, 0.95), row(3, 1.0)])
    assert len(chart.bars) == 10
    heights = [b.height for b in chart.bars]
    assert heights[0] == heights[9] == max(heights) and heights[1:9] == [0] * 8
    assert chart.bars[0].title == "2 seeds scored 0 to 0.1"
    assert chart.y_max_label == "2"


def test_scores_outside_0_1_use_their_own_range_and_a_single_value_still_draws():
    assert (
        charts.score_histogram(rows=[row(0, -5.0), row(1, 5.0)]).bars[0].title.endswith("-5 to -4")
    )
    single = charts.score_histogram(rows=[row(0, 3.0)])
    assert sum(1 for b in single.bars if b.height) == 1


def test_no_scores_or_no_cost_gives_an_empty_chart():
    assert charts.score_histogram(rows=[row(0)]).empty
    assert charts.cost_per_seed(rows=[row(0, cost=0.0), row(1)]).empty


def test_cost_chart_has_a_bar_per_seed_in_seed_order_and_marks_failures():
    chart = charts.cost_per_seed(rows=[row(2, cost=0.2), row(1, cost=0.1, status="failed")])
    assert [b.title for b in chart.bars] == ["seed 1: $0.100000 (failed)", "seed 2: $0.200000"]
    assert chart.bars[0].failed and not chart.bars[1].failed and chart.has_failed
    assert chart.bars[1].height == 2 * chart.bars[0].height


def test_a_failed_seed_that_cost_nothing_still_shows_as_the_legend_says():
    chart = charts.cost_per_seed(rows=[row(0, cost=0.2), row(1, cost=0.0, status="failed")])
    assert chart.has_failed and chart.bars[1].failed
    assert chart.bars[1].height == charts.FAILED_STUB_H


def test_a_big_job_groups_consecutive_seeds_into_at_most_max_bars():
    chart = charts.cost_per_seed(rows=[row(i, cost=0.001) for i in range(1000)])
    assert len(chart.bars) <= charts.MAX_BARS
    assert chart.bars[0].title == "seeds 0-8: $0.001000 (mean)"
