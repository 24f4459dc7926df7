"""The figures the pages keep current, as text by name, and what a page needs to follow a job.

A figure's text is made here once, for the template that renders the page and for the JSON the
page fetches when the job's event stream says something changed (`data-figure="<name>"` cells
are filled from `figures[name]`): a figure added to `job_figure_texts` is live on the jobs list
without any JavaScript of its own. Each figure has a one-line definition (`FIGURE_HELP`), shown
as its tooltip."""

from __future__ import annotations

from typing import Any

from django.db.models import Max

from frontend.templatetags.dashboard import DASH, duration, score, tokens, usd
from jobs.models import EvalJob, JobEvent, JobStatus

FIGURE_HELP = {
    "mean_score": (
        "Mean score over every finished sample (succeeded or failed), a failed sample or one "
        "without a score counting 0; cancelled samples are not counted."
    ),
    "cost": (
        "What the job's LLM calls cost at the model's list price (genai-prices or "
        "EVALHUB_MODEL_PRICES); unknown when a model has no known price."
    ),
    "tokens": "Prompt plus completion tokens of every LLM call the job's rollouts made.",
    "duration": "From the job's start to its end, or to now while it runs.",
    "latency": "Time of one rollout (the task app's POST /rollout), over the succeeded samples.",
    "succeeded_failed": "Samples done: succeeded, and failed after their last attempt.",
}


def job_figure_texts(*, job: EvalJob, figures: dict[str, Any]) -> dict[str, str]:
    """The jobs list's figures of one job (`frontend.selectors.job_list_figures`), as shown.
    Before the job starts nothing has been spent: a dash, not `0` and `$0`."""
    started = job.started_at is not None or figures["tokens"]
    return {
        "mean_score": score(figures["mean_score"]),
        "cost": usd(figures["cost_usd"]) if started else DASH,
        "tokens": tokens(figures["tokens"]) if started else DASH,
        "duration": duration(figures["duration_s"]),
    }


def job_page_figure_texts(*, job: EvalJob, figures: dict[str, Any]) -> dict[str, str]:
    """The job page's figure cards: the jobs list's figures and the samples' counts, all from
    the same read as the progress bar (`frontend.selectors.job_live_figures`)."""
    p = figures["progress"]
    return {
        **job_figure_texts(job=job, figures=figures),
        "mean_count": f"over {p['completed']} samples, {p['failed']} failed counted 0",
        "succeeded_failed": f"{p['succeeded']} / {p['failed']}",
    }


def status_shown(*, status: str, succeeded: int, failed: int) -> dict[str, str]:
    """A job's status as its badge shows it. A job that completed with every finished sample
    failed reads "all failed", in red: not a green "completed" over a mean of 0."""
    if status == JobStatus.COMPLETED and failed and not succeeded:
        title = f"The job completed, but every sample failed ({failed} of {failed})."
        return {"text": "all failed", "badge": "failed", "title": title}
    return {"text": status, "badge": status, "title": ""}


def latest_event_seq(*, job_ids: list[str]) -> dict[str, int]:
    """The last event number of each job: a page listens from there on, not from the start."""
    return dict(
        JobEvent.objects.filter(job_id__in=job_ids)
        .values_list("job_id")
        .annotate(last=Max("seq"))
        .order_by()
    )
