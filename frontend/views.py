"""The dashboard's pages: thin views over jobs.selectors/services and frontend.selectors.
Session authentication, CSRF on every form."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from frontend import exchange, job_page, jobs_table, live, seed_table, timeline, triage
from frontend import selectors as dash
from frontend.templatetags.environment_trace import tool_executions
from jobs import selectors, services
from jobs.apikeys import api_key_create, api_key_revoke
from jobs.models import JobStatus
from jobs.public import LIST_DEFERRED, job_config, job_warnings
from traces.redaction import Redactor, job_redactor
from traces.results import result_rows, totals
from traces.zip.export import job_traces_response

JOBS_PER_PAGE = 25
SEED_COLUMNS = [
    ("seed", "Seed"),
    ("status", "Status"),
    ("score", "Score"),
    ("latency_ms", "Latency"),
    ("tokens", "Tokens"),
    ("cost_usd", "Cost"),
    ("attempts", "Attempts"),
]


# --- API keys ---------------------------------------------------------------------------------


@login_required
@never_cache
def api_keys(request: HttpRequest) -> HttpResponse:
    """GET lists the keys; POST creates one and shows it in this response only: it is never
    stored in plaintext, so it cannot be shown again."""
    created = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()[:100]
        key, plaintext = api_key_create(user=request.user, name=name)
        created = {"key": key, "plaintext": plaintext}
    elif request.method != "GET":
        return HttpResponse(status=405)
    return render(
        request,
        "frontend/api_keys.html",
        {"keys": dash.api_key_list(user=request.user), "created": created, "nav": "keys"},
    )


@login_required
@require_POST
def api_key_revoke_view(request: HttpRequest, prefix: str) -> HttpResponse:
    key = api_key_revoke(prefix=prefix, user=request.user)
    if key is None:
        raise Http404("No such key.")
    messages.success(request, f"Key {key.prefix}… is revoked.")
    return redirect("frontend:api-keys")


# --- jobs list ------------------------------------------------------------------------------


@login_required
@require_GET
@never_cache
def job_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status") or ""
    if status not in JobStatus.values:
        status = ""
    search = {name: request.GET.get(name, "").strip()[:200] for name in ("tag", "q")}
    jobs = selectors.job_list(
        owner=request.user, status=status or None, **{k: v or None for k, v in search.items()}
    ).defer(*LIST_DEFERRED)
    sort, descending = jobs_table.order_asked(request.GET)
    jobs = jobs_table.jobs_ordered(jobs, sort, descending)
    page = Paginator(jobs, JOBS_PER_PAGE)
    page_obj = page.get_page(request.GET.get("page"))
    jobs = list(page_obj.object_list)
    figures = dash.job_list_figures(jobs=jobs)
    seqs = live.latest_event_seq(job_ids=[job.id for job in jobs])
    return render(
        request,
        "frontend/job_list.html",
        {
            "rows": [
                {
                    "job": job,
                    **figures[job.id],
                    "shown": dash.job_status_shown(job=job, progress=figures[job.id]["progress"]),
                    "texts": live.job_figure_texts(job=job, figures=figures[job.id]),
                    "event_seq": seqs.get(job.id, 0),
                }
                for job in jobs
            ],
            "figure_help": live.FIGURE_HELP,
            "page_obj": page_obj,
            "sort": sort,
            "descending": descending,
            "query_without_page": _without(request.GET, "page"),
            "status": status,
            "search": search,
            "statuses": JobStatus.values,
            "nav": "jobs",
        },
    )


@login_required
@require_GET
@never_cache
def job_list_progress(request: HttpRequest) -> JsonResponse:
    """Progress of the jobs named in `?ids=a,b`, for the jobs list's live bars."""
    ids = [i for i in request.GET.get("ids", "").split(",") if i]
    return JsonResponse({"jobs": dash.job_progress_many(owner=request.user, job_ids=ids)})


# --- a job ----------------------------------------------------------------------------------


@login_required
@require_GET
@never_cache
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    figures = job_page.job_page_figures(job=job)
    current = dash.job_live_figures(job=job)
    table = triage.TableQuery.from_query(request.GET)
    seeds_page, page_rows = seed_table.table_page(job=job, params=request.GET)
    return render(
        request,
        "frontend/job_detail.html",
        {
            "job": job,
            "config": job_config(job),
            "config_json": json.dumps(job_config(job), indent=2, default=str),
            "warnings": job_warnings(job),
            **figures,
            "progress": current["progress"],
            "shown": current["shown"],
            "texts": current["texts"],
            "event_seq": live.latest_event_seq(job_ids=[job.id]).get(job.id, 0),
            "subtitle": [p for p in (job.app_id, job.env_name, job.policy.get("model")) if p],
            "figure_help": live.FIGURE_HELP,
            "seeds_page": seeds_page,
            "page_rows": page_rows,
            "num_shown": seeds_page.paginator.count,
            "per_page": seed_table.page_size(request.GET),
            "page_sizes": seed_table.PAGE_SIZES,
            "sort": table.sort,
            "descending": table.descending,
            "seed_columns": SEED_COLUMNS,
            "optional_columns": ("latency_ms", "tokens", "attempts"),
            "table_filter": table.as_filter(),
            "query_without_page": _without(request.GET, "page"),
            "seed_query": triage.carried_query(request.GET),
            # Re-rendering the results of a big job is not free: do it less often.
            "results_refresh_ms": 2000 if job.num_seeds <= 2000 else 15000,
            "nav": "jobs",
        },
    )


@login_required
@require_GET
@never_cache
def job_progress(request: HttpRequest, job_id: str) -> JsonResponse:
    """What the job page fetches when its job changes: the bar, the counts, the badge and the
    figure cards, from one read (`frontend.selectors.job_live_figures`)."""
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    current = dash.job_live_figures(job=job)
    return JsonResponse(
        {
            "job_id": job.id,
            "status": job.status,
            "terminal": job.is_terminal,
            "error": job.error,
            **current["progress"],
            "shown": current["shown"],
            "figures": current["texts"],
        }
    )


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: str) -> HttpResponse:
    job = services.job_cancel(job=selectors.job_owned(owner=request.user, job_id=job_id))
    messages.info(request, f"Job {job.id} is {job.status}.")
    return redirect("frontend:job-detail", job_id=job.id)


@login_required
@require_GET
def job_traces_zip(request: HttpRequest, job_id: str) -> HttpResponse:
    return job_traces_response(job=selectors.job_owned(owner=request.user, job_id=job_id))


# --- a seed ---------------------------------------------------------------------------------


@login_required
@require_GET
@never_cache
def seed_detail(request: HttpRequest, job_id: str, seed: int) -> HttpResponse:
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    repeat = request.GET.get("repeat", "0")
    seed_run = selectors.seed_run_get(
        job=job, seed=seed, repeat=int(repeat) if repeat.isdigit() and len(repeat) < 10 else 0
    )
    if seed_run is None:
        raise Http404("No such seed in this job.")
    usage = totals.seed_usage(job=job, seed_run=seed_run).get(seed_run.id)
    redactor = job_redactor(job=job)
    after = request.GET.get("calls_after", "")
    page = dash.seed_attempts_page(
        seed_run=seed_run,
        redactor=redactor,
        size=dash.SEED_PAGE_CALLS,
        after=int(after) if after.isdigit() and len(after) < 19 else None,
    )
    attempts = page.attempts
    executions = tool_executions(seed_run, job)
    around = seed_table.seed_neighbours(job=job, seed=seed, params=request.GET)
    return render(
        request,
        "frontend/seed_detail.html",
        {
            "job": job,
            "seed_run": seed_run,
            "row": result_rows.seed_result_row(seed_run, usage),
            "attempts": attempts,
            "raw_exchanges": exchange.raw_exchanges(attempts=attempts, redactor=redactor),
            # A tool is placed after the call that asked for it: only with every call at hand.
            "timelines": timeline.seed_timelines(attempts, [] if page.paged else executions),
            "calls_page": page,
            "page_calls": dash.SEED_PAGE_CALLS,
            "first_calls_query": _without(request.GET, "calls_after"),
            "next_calls_query": _with(request.GET, calls_after=page.next_after),
            "executions": executions,
            "seed_error": redactor.text(seed_run.error or ""),
            "metrics_json": _redacted_json(seed_run.metrics, redactor),
            "task_trace_json": _redacted_json(seed_run.task_trace, redactor),
            "around": around,
            "seed_query": triage.carried_query(request.GET),
            "nav": "jobs",
        },
    )


def _without(params, *names: str) -> str:
    """The query string less `names` (the pagers' links add their own `page`)."""
    query = params.copy()
    for name in names:
        query.pop(name, None)
    return query.urlencode()


def _with(params, **values: Any) -> str:
    """The query string with `values` set in it."""
    query = params.copy()
    for name, value in values.items():
        query[name] = str(value)
    return query.urlencode()


def _redacted_json(value: Any, redactor: Redactor) -> str | None:
    """Task apps are user code: whatever secret one echoed into its answer stays hidden."""
    if value is None:
        return None
    return json.dumps(redactor.value(value), indent=2, ensure_ascii=False, default=str)
