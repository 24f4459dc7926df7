"""People's labels on the dashboard: `{% job_agreement job %}` on the job page renders how many
samples carry a label, the way to the review queue, and how the task app, the judge and people
agree (`jobs.labels.job_people`); `{% seed_labels job seed_run %}` on the seed page its labels,
those made on the original a rerun reused marked so."""

from __future__ import annotations

from typing import Any

from django import template

from jobs import labels
from jobs.agreement import PAIRS
from jobs.models import EvalJob, SeedRun
from traces.redaction import job_redactor

register = template.Library()

RATER_NAMES = {"task_app": "Task app", "judge": "Judge", "people": "People"}


@register.inclusion_tag("frontend/_agreement.html")
def job_agreement(job: EvalJob) -> dict[str, Any]:
    people = labels.job_people(job=job)
    figures = people["agreement"]
    return {
        "job": job,
        "num_labelled": people["num_labelled"],
        "reward_source": people["reward_source"],
        "people_figures": people.get("people_figures"),
        "num_scored_by_people": people.get("num_scored_by_people"),
        "rated": figures["rated"],
        "pairs": [
            {"key": f"{a}_{b}", "names": f"{RATER_NAMES[a]} / {RATER_NAMES[b]}",
             **figures["pairs"][f"{a}_{b}"]}
            for a, b in PAIRS
        ],
    }  # fmt: skip


@register.inclusion_tag("frontend/_seed_labels.html")
def seed_labels(job: EvalJob, seed_run: SeedRun) -> dict[str, Any]:
    carried = labels.labels_of([seed_run])[seed_run.id]
    return {"job": job, "seed_run": seed_run, "labels": job_redactor(job=job).value(carried)}
