"""The dashboard's pages for a job's numbers beyond its own page: rerun its failed seeds,
compare two jobs (and one seed of both side by side), the results as CSV."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from frontend import selectors as dash
from jobs import selectors
from jobs.models import EvalJob
from jobs.reruns import RerunRefused, job_rerun
from traces import comparison, exports, reuse
from traces.redaction import job_redactor

SORTS = {
    "": lambda s: (comparison.KIND_ORDER[s["kind"]], s["delta"], s["seed"]),
    "delta": lambda s: (s["delta"], s["seed"]),
    "-delta": lambda s: (-s["delta"], s["seed"]),
    "seed": lambda s: s["seed"],
}


def _owned_job(request: HttpRequest, job_id: str) -> EvalJob:
    return selectors.job_owned(owner=request.user, job_id=job_id)


@login_required
@require_POST
def job_rerun_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """The job page's "Rerun failed seeds": a new job reusing the succeeded samples."""
    parent = _owned_job(request, job_id)
    try:
        job = job_rerun(parent=parent, seeds="failed", copy_attempt_children=reuse.llm_calls_copy)
    except RerunRefused as exc:
        messages.error(request, f"Cannot rerun: {exc.message}")
        return redirect("frontend:job-detail", job_id=parent.id)
    messages.success(request, f"Rerunning the failed seeds of {parent.id}.")
    return redirect("frontend:job-detail", job_id=job.id)


@login_required
@require_GET
def job_results_csv(request: HttpRequest, job_id: str) -> StreamingHttpResponse:
    job = _owned_job(request, job_id)
    response = StreamingHttpResponse(
        list(exports.results_csv_lines(job=job)), content_type="text/csv"
    )
    response["Content-Disposition"] = f'attachment; filename="{job.id}-results.csv"'
    return response


def _pair(request: HttpRequest) -> tuple[EvalJob, EvalJob]:
    base, candidate = request.GET.get("base", ""), request.GET.get("candidate", "")
    if not base or not candidate:
        raise Http404("Pick two jobs to compare.")
    return _owned_job(request, base), _owned_job(request, candidate)


@login_required
@require_GET
@never_cache
def compare(request: HttpRequest) -> HttpResponse:
    """Two jobs seed by seed. `?pick=a&pick=b` (the jobs list's checkboxes) compares the newer
    against the older."""
    picked = request.GET.getlist("pick")
    if picked:
        jobs = sorted(
            (_owned_job(request, job_id) for job_id in picked[:2]), key=lambda j: j.created_at
        )
        if len(jobs) != 2:
            messages.error(request, "Pick two jobs to compare.")
            return redirect("frontend:job-list")
        return redirect(f"{request.path}?base={jobs[0].id}&candidate={jobs[1].id}")
    base, candidate = _pair(request)
    result = comparison.jobs_compare(base=base, candidate=candidate)
    sort = request.GET.get("sort", "")
    result["seeds"].sort(key=SORTS.get(sort, SORTS[""]))
    return render(
        request,
        "frontend/compare.html",
        {"base": base, "candidate": candidate, "c": result, "sort": sort, "nav": "jobs"},
    )


def _side(job: EvalJob, seed: int) -> dict:
    seed_run = selectors.seed_run_get(job=job, seed=seed)
    if seed_run is None:
        raise Http404("No such seed in this job.")
    attempts = dash.seed_attempts(seed_run=seed_run, redactor=job_redactor(job=job))
    return {"job": job, "seed_run": seed_run, "last": attempts[-1] if attempts else None,
            "error": job_redactor(job=job).text(seed_run.error or "")}  # fmt: skip


@login_required
@require_GET
@never_cache
def compare_seed(request: HttpRequest, seed: int) -> HttpResponse:
    """One seed of both jobs side by side: result and the last attempt's conversation."""
    base, candidate = _pair(request)
    return render(
        request,
        "frontend/compare_seed.html",
        {"seed": seed, "sides": [("Base", _side(base, seed)), ("Candidate", _side(candidate, seed))],
         "base": base, "candidate": candidate, "nav": "jobs"},
    )  # fmt: skip
