"""The dashboard's pages for a job's numbers beyond its own page: rerun its failed seeds,
compare two jobs (and one seed of both side by side), the results as CSV."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from frontend import comparing
from frontend import selectors as dash
from jobs import selectors
from jobs.models import EvalJob
from jobs.reruns import RerunRefused, job_rerun
from traces.calls import reuse
from traces.redaction import job_redactor
from traces.results import comparison, exports, inspect_log


@login_required
@require_POST
def job_rerun_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """The job page's "Rerun failed seeds": a new job reusing the succeeded samples."""
    parent = selectors.job_owned(owner=request.user, job_id=job_id)
    try:
        job = job_rerun(parent=parent, seeds="failed", copy_attempt_children=reuse.llm_calls_copy)
    except RerunRefused as exc:
        messages.error(request, f"Cannot rerun: {exc.message}")
        return redirect("frontend:job-detail", job_id=parent.id)
    messages.success(request, f"Rerunning the failed seeds of {parent.id}.")
    return redirect("frontend:job-detail", job_id=job.id)


def _download(lines, *, content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(list(lines), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "private, no-store"
    return response


@login_required
@require_GET
def job_results_csv(request: HttpRequest, job_id: str) -> StreamingHttpResponse:
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    lines = exports.results_csv_lines(job=job)
    return _download(lines, content_type="text/csv", filename=f"{job.id}-results.csv")


@login_required
@require_GET
def job_sft_jsonl(request: HttpRequest, job_id: str) -> StreamingHttpResponse:
    """The SFT export (`exports.sft_lines`, as the API's `export/sft.jsonl`): the conversations
    of the samples that passed (scored at least the job's pass threshold), one chat a line."""
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    lines = exports.sft_lines(job=job, min_score=job.pass_threshold)
    return _download(lines, content_type="application/jsonl", filename=f"{job.id}-sft.jsonl")


@login_required
@require_GET
def compare_csv(request: HttpRequest) -> StreamingHttpResponse:
    """The compare page's seeds as CSV, in its order and with its filter."""
    base, candidate = _pair(request)
    query = comparing.CompareQuery.from_query(request.GET)
    seeds = comparison.jobs_compare(base=base, candidate=candidate)["seeds"]
    lines = exports.comparison_csv_lines(seeds=comparing.seed_rows(seeds, query))
    name = f"compare-{base.id}-{candidate.id}.csv"
    return _download(lines, content_type="text/csv", filename=name)


@login_required
@require_GET
def job_inspect_log(request: HttpRequest, job_id: str) -> StreamingHttpResponse:
    """The job as an Inspect AI eval log, for `inspect view` (traces.results.inspect_log)."""
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    response = StreamingHttpResponse(
        inspect_log.inspect_log_chunks(job=job), content_type="application/json"
    )
    name = inspect_log.inspect_log_filename(job)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def _pair(request: HttpRequest) -> tuple[EvalJob, EvalJob]:
    base, candidate = request.GET.get("base", ""), request.GET.get("candidate", "")
    if not base or not candidate:
        raise Http404("Pick two jobs to compare.")
    base_job = selectors.job_owned(owner=request.user, job_id=base)
    return base_job, selectors.job_owned(owner=request.user, job_id=candidate)


@login_required
@require_GET
@never_cache
def compare(request: HttpRequest) -> HttpResponse:
    """Two jobs seed by seed. `?pick=a&pick=b` (the jobs list's checkboxes) compares the newer
    against the older."""
    picked = request.GET.getlist("pick")
    if picked:
        jobs = sorted(
            (selectors.job_owned(owner=request.user, job_id=job_id) for job_id in picked[:2]),
            key=lambda j: j.created_at,
        )
        if len(jobs) != 2:
            messages.error(request, "Pick two jobs to compare.")
            return redirect("frontend:job-list")
        return redirect(f"{request.path}?base={jobs[0].id}&candidate={jobs[1].id}")
    base, candidate = _pair(request)
    result = comparison.jobs_compare(base=base, candidate=candidate)
    query = comparing.CompareQuery.from_query(request.GET)
    return render(
        request,
        "frontend/compare.html",
        {"base": base, "candidate": candidate, "c": result, "sort": query.sort,
         "rows": comparing.seed_rows(result["seeds"], query), "hide_ties": query.hide_ties,
         "carried": query.carried(), "nav": "jobs"},
    )  # fmt: skip


def _side(job: EvalJob, seed: int) -> dict:
    seed_run = selectors.seed_run_get(job=job, seed=seed)
    if seed_run is None:
        raise Http404("No such seed in this job.")
    # The last attempt's first calls (a big sample's: the seed page has the rest).
    page = dash.seed_attempts_page(
        seed_run=seed_run,
        redactor=job_redactor(job=job),
        size=dash.SEED_PAGE_CALLS,
        last_attempt=True,
    )
    return {"job": job, "seed_run": seed_run, "last": (page.attempts or [None])[-1],
            "more_calls": page.next_after is not None,
            "error": job_redactor(job=job).text(seed_run.error or "")}  # fmt: skip


@login_required
@require_GET
@never_cache
def compare_seed(request: HttpRequest, seed: int) -> HttpResponse:
    """One seed of both jobs side by side: result and the last attempt's conversation, and the
    compared seeds before and after it in the compare page's order."""
    base, candidate = _pair(request)
    query = comparing.CompareQuery.from_query(request.GET)
    rows = comparing.seed_rows(
        comparison.jobs_compare(base=base, candidate=candidate)["seeds"], query
    )
    row = next((r for r in rows if r["seed"] == seed), None)
    return render(
        request,
        "frontend/compare_seed.html",
        {"seed": seed, "sides": [("Base", _side(base, seed)), ("Candidate", _side(candidate, seed))],
         "base": base, "candidate": candidate, "row": row, "around": comparing.around(rows, seed),
         "carried": query.carried(), "nav": "jobs"},
    )  # fmt: skip
