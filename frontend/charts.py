"""Bar-chart geometry for the job page, drawn as inline SVG by the templates (no chart library,
no build step). Coordinates are in a fixed viewBox; the SVG scales to its container."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

WIDTH = 480
HEIGHT = 200
PAD_LEFT = 58
PAD_BOTTOM = 26
PAD_TOP = 8
MAX_BARS = 120
# Height of the mark drawn for a failed seed whose cost is too small to show.
FAILED_STUB_H = 3


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str
    failed: bool = False


@dataclass
class Chart:
    bars: list[Bar]
    x_labels: list[tuple[float, str]]
    y_max_label: str
    empty: bool
    has_failed: bool = False
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = PAD_LEFT
    plot_bottom: int = HEIGHT - PAD_BOTTOM
    plot_top: int = PAD_TOP


def _plot_box() -> tuple[float, float]:
    return WIDTH - PAD_LEFT - 4, HEIGHT - PAD_BOTTOM - PAD_TOP


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def score_histogram(*, rows: list[dict[str, Any]], bins: int = 10) -> Chart:
    """How many seeds scored in each of `bins` equal ranges. Scores in [0, 1] use that range;
    otherwise the range of the scores seen."""
    scores = [r["score"] for r in rows if r["score"] is not None]
    if not scores:
        return Chart(bars=[], x_labels=[], y_max_label="", empty=True)
    low, high = min(scores), max(scores)
    if 0.0 <= low and high <= 1.0:
        low, high = 0.0, 1.0
    if high == low:
        low, high = low - 0.5, high + 0.5
    step = (high - low) / bins
    counts = [0] * bins
    for s in scores:
        counts[min(bins - 1, int((s - low) / step))] += 1
    plot_w, plot_h = _plot_box()
    top = max(counts)
    bar_w = plot_w / bins
    bars = []
    for i, n in enumerate(counts):
        h = plot_h * n / top
        lo, hi = low + i * step, low + (i + 1) * step
        bars.append(
            Bar(
                x=PAD_LEFT + i * bar_w + 1,
                y=PAD_TOP + plot_h - h,
                width=max(bar_w - 2, 1),
                height=h,
                title=f"{n} seed{'s' if n != 1 else ''} scored {_fmt(lo)} to {_fmt(hi)}",
            )
        )
    labels = [(PAD_LEFT + i * bar_w, _fmt(low + i * step)) for i in range(0, bins + 1, 2)]
    return Chart(bars=bars, x_labels=labels, y_max_label=str(top), empty=False)


def cost_per_seed(*, rows: list[dict[str, Any]]) -> Chart:
    """Cost of each seed in seed order. Past MAX_BARS seeds, each bar is the mean of a run of
    consecutive seeds, so a big job still draws a readable chart."""
    rows = sorted(rows, key=lambda r: r["seed"])
    if not any(r["cost_usd"] for r in rows):
        return Chart(bars=[], x_labels=[], y_max_label="", empty=True)
    group = max(1, math.ceil(len(rows) / MAX_BARS))
    groups = [rows[i : i + group] for i in range(0, len(rows), group)]
    values = []
    for g in groups:
        known = [r["cost_usd"] for r in g if r["cost_usd"] is not None]
        values.append(sum(known) / len(known) if known else 0.0)
    top = max(values) or 1.0
    plot_w, plot_h = _plot_box()
    bar_w = plot_w / len(groups)
    bars = []
    for i, (g, v) in enumerate(zip(groups, values, strict=True)):
        failed = any(r["status"] == "failed" for r in g)
        # A failed seed often cost nothing: a stub keeps it visible, as the legend promises.
        h = max(plot_h * v / top, FAILED_STUB_H if failed else 0)
        seeds = f"seed {g[0]['seed']}" if len(g) == 1 else f"seeds {g[0]['seed']}-{g[-1]['seed']}"
        mean = "" if len(g) == 1 else " (mean)"
        bars.append(
            Bar(
                x=PAD_LEFT + i * bar_w + (1 if bar_w > 4 else 0),
                y=PAD_TOP + plot_h - h,
                width=max(bar_w - (2 if bar_w > 4 else 0), 0.5),
                height=h,
                title=f"{seeds}: ${v:.6f}{mean}{' (failed)' if failed else ''}",
                failed=failed,
            )
        )
    every = math.ceil(len(groups) / 6)
    labels = [
        (PAD_LEFT + i * bar_w + bar_w / 2, str(groups[i][0]["seed"]))
        for i in range(0, len(groups), every)
    ]
    return Chart(
        bars=bars,
        x_labels=labels,
        y_max_label=f"${top:.2g}",
        empty=False,
        has_failed=any(b.failed for b in bars),
    )


def as_data(chart: Chart) -> dict[str, Any]:
    """The chart as JSON values, to be kept with the job's figures (`chart_of` reads it back)."""
    return asdict(chart)


def chart_of(data: dict[str, Any]) -> Chart:
    return Chart(**{**data, "bars": [Bar(**bar) for bar in data["bars"]]})
