"""What the job page shows of all of a job's rows: the summary, the first per-seed figures, the
charts, the failures by error and the calls per model. Made in one pass over the rows and kept
with the job's figures (`jobs/figures.py`, through `traces.results.result_rows.kept_figures`),
so a view of a big job reads them instead of its rows; they are kept as JSON and read back
here."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Any

from frontend import charts, exchange, triage
from jobs.models import EvalJob
from traces.results import result_rows, totals

# Per-seed figures shown on the job page (all of them are in the API's `seeds`).
SEED_FIGURES_SHOWN = 100


def job_page_figures(*, job: EvalJob) -> dict[str, Any]:
    """The job page's context made from all the job's rows (see the module's docstring)."""
    extra = partial(_dashboard, job)
    kept = result_rows.kept_figures(job=job, names=("summary", "job_page"), extra=extra)
    page = kept["job_page"]
    models = [
        exchange.ModelRow(
            model=m["model"], usage=totals.Usage.from_kept(m["usage"]), kind=m["kind"]
        )
        for m in page["model_rows"]
    ]
    return {
        "summary": kept["summary"],
        "seed_figures": page["seed_figures"] if job.repeats > 1 else [],
        "num_seed_figures": page["num_seed_figures"],
        "score_chart": charts.chart_of(page["score_chart"]),
        "cost_chart": charts.chart_of(page["cost_chart"]),
        "failure_groups": [tuple(group) for group in page["failure_groups"]],
        "model_rows": models,
        "model_totals": exchange.model_totals(models),
    }


def _dashboard(job: EvalJob, rows: totals.RowTable, kept: dict[str, Any]) -> dict[str, Any]:
    models = exchange.model_breakdown(job=job)
    return {
        "job_page": {
            "seed_figures": kept["seeds"][:SEED_FIGURES_SHOWN],
            "num_seed_figures": len(kept["seeds"]),
            "score_chart": charts.as_data(charts.score_histogram(rows=rows)),
            "cost_chart": charts.as_data(charts.cost_per_seed(rows=rows)),
            "failure_groups": triage.failure_groups(rows),
            "model_rows": [
                {"model": m.model, "kind": m.kind, "usage": asdict(m.usage)} for m in models
            ],
        }
    }
