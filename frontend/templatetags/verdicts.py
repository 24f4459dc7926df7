"""The verifier's verdicts on the dashboard: `{% seed_verdict job seed_run %}` on the seed page
and `{% job_verdicts job %}` on the job page, each rendering a partial of its own."""

from __future__ import annotations

from typing import Any

from django import template

from jobs.models import EvalJob, SeedRun
from jobs.verifier.config import verifier_config_of
from traces.models import CallKind
from traces.redaction import job_redactor
from traces.results import result_rows, totals

register = template.Library()

# Rows of the job page's verdict table (the results and the zip have them all).
VERDICTS_SHOWN = 100


def _config(job: EvalJob):
    return verifier_config_of(job.verifier_config, policy=job.policy)


@register.inclusion_tag("frontend/_verdict_seed.html")
def seed_verdict(job: EvalJob, seed_run: SeedRun) -> dict[str, Any]:
    if not seed_run.judge_status:
        return {"shown": False}
    judge = totals.seed_usage(job=job, seed_run=seed_run, kind=CallKind.JUDGE).get(seed_run.id)
    redactor = job_redactor(job=job)
    fields = result_rows.judge_fields(seed_run, judge)
    return {
        "shown": True,
        "config": _config(job),
        "v": {
            **fields,
            "verifier_justification": redactor.text(fields["verifier_justification"] or ""),
            "verifier_error": redactor.text(fields["verifier_error"] or ""),
            "verifier_score": seed_run.verifier_score,
            "score": seed_run.score,
        },
    }


@register.inclusion_tag("frontend/_verdict_job.html")
def job_verdicts(job: EvalJob) -> dict[str, Any]:
    config = _config(job)
    if not config.enabled:
        return {"shown": False}
    # The first rows only; the figures over all of them are the summary's, kept with the job.
    judged = SeedRun.objects.filter(job=job).exclude(judge_status="").defer("task_trace")
    shown = result_rows.seed_runs_rows(list(judged.order_by("seed", "repeat")[:VERDICTS_SHOWN]))
    redactor = job_redactor(job=job)
    for row in shown:
        row["verifier_justification"] = redactor.text(row["verifier_justification"] or "")
        row["verifier_error"] = redactor.text(row["verifier_error"] or "")
    return {
        "shown": True,
        "job": job,
        "config": config,
        "summary": result_rows.job_summary(job),
        "rows": shown,
        "more": judged.count() - len(shown),
    }
