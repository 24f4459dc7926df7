"""The public eval-job API (../shared/contracts/eval-jobs-api.md). One view per operation:
parse with an input serializer, call a service or selector, render."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from jobs import selectors, services
from jobs.api import answers
from jobs.api.answers import ERROR, ERRORS
from jobs.api.idempotency import IDEMPOTENCY_PARAMETER, idempotency_key, job_made
from jobs.api.inputs import JobCancelInput, JobCreateInput, body_parsed
from jobs.api.pagination import JobCursorPagination
from jobs.api.replays import replay_checked
from jobs.fields import INT64_MAX
from jobs.models import EvalJob, JobStatus, SeedRun
from jobs.public import (
    LIST_DEFERRED,
    event_body,
    job_list_body,
    job_status_body,
)
from traces.redaction import job_redactor
from traces.results import stream as results
from traces.zip.export import job_traces_response
from traces.zip.seed_stream import seed_trace_response

# --- errors ---------------------------------------------------------------------------------


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error is JSON: {"error": code, "detail": readable text, "fields": {...}}.
    `fields` names each offending field, so a client printing the body shows what to fix."""
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"error": "request_too_large", "detail": "Request body is too large."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    if isinstance(exc, exceptions.ParseError):
        exc = exceptions.ValidationError(
            {"body": [f"Request body is not valid JSON: {exc.detail}"]}
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = response.data if isinstance(response.data, dict) else {"body": response.data}
        first = ", ".join(f"{name}: {_first_message(msgs)}" for name, msgs in fields.items())
        response.data = {
            "error": getattr(exc, "error_code", "invalid_request"),
            "detail": f"Invalid request. {first}",
            "fields": fields,
        }
    else:
        detail = (
            response.data.get("detail", "") if isinstance(response.data, dict) else response.data
        )
        response.data = {"error": getattr(exc, "default_code", "error"), "detail": str(detail)}
    return response


def _first_message(messages: Any) -> str:
    if isinstance(messages, list) and messages:
        return str(messages[0])
    if isinstance(messages, dict):
        return "; ".join(f"{k}: {_first_message(v)}" for k, v in messages.items())
    return str(messages)


# --- POST /api/eval/jobs --------------------------------------------------------------------


class JobListCreateView(APIView):
    @extend_schema(
        request=JobCreateInput,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            201: answers.JobCreated,
            200: answers.JobCreated,
            **ERRORS,
            413: ERROR,
            422: ERROR,
        },
        summary="Create an eval job",
        tags=["jobs"],
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        data = body_parsed(request.data, JobCreateInput)
        spec = replay_checked(request.user, data, data.to_spec())
        return job_made(request, key=key, spec=spec, asked=request.data)

    @extend_schema(
        parameters=[
            OpenApiParameter("limit", int, description="page size, 1-200 (default 50)"),
            OpenApiParameter("status", str, enum=list(JobStatus.values)),
            OpenApiParameter("cursor", str, description="from `next_cursor` of the previous page"),
            OpenApiParameter("tag", str, description="only jobs with this tag"),
            OpenApiParameter("q", str, description="search names, app id, model and env name"),
        ],
        responses={200: answers.JobList, **ERRORS},
        summary="List your eval jobs, newest first",
        operation_id="api_eval_jobs_list",
        tags=["jobs"],
    )
    def get(self, request: Request) -> Response:
        status_filter = request.query_params.get("status") or None
        if status_filter and status_filter not in JobStatus.values:
            raise exceptions.ValidationError(
                {"status": [f"must be one of {', '.join(JobStatus.values)}"]}
            )
        paginator = JobCursorPagination()
        page = paginator.paginate_queryset(
            selectors.job_list(
                owner=request.user, status=status_filter, **_list_filters(request)
            ).defer(*LIST_DEFERRED),
            request,
            view=self,
        )
        progress = selectors.job_progress_many(jobs=page)
        jobs = [job_list_body(job, progress[job.id]) for job in page]
        next_link = paginator.get_next_link()
        return Response(
            {
                "jobs": jobs,
                "next": next_link,
                "next_cursor": paginator.cursor_param_value(next_link),
                "has_more": next_link is not None,
            }
        )


def _list_filters(request: Request) -> dict[str, str | None]:
    found = {name: (request.query_params.get(name) or "").strip() for name in ("tag", "q")}
    for name, value in found.items():
        if len(value) > 200 or "\x00" in value:
            raise exceptions.ValidationError({name: ["must be at most 200 characters, no NUL"]})
    return {name: value or None for name, value in found.items()}


class JobDetailView(APIView):
    @extend_schema(
        responses={200: answers.Job, **ERRORS},
        summary="Status and progress of a job",
        tags=["jobs"],
    )
    def get(self, request: Request, job_id: str) -> Response:
        return Response(job_status_body(selectors.job_owned(owner=request.user, job_id=job_id)))


class JobResultsView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("limit", int), OpenApiParameter("cursor", str)],
        responses={200: answers.RESULTS, **ERRORS},
        summary="Summary and per-seed results (whole and streamed, or a page with `limit`)",
        tags=["results"],
    )
    def get(self, request: Request, job_id: str):
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        params = request.query_params
        if "limit" in params or "cursor" in params:  # traces.results.stream: one page
            limit = _int_param(request, "limit", 1000, 1, results.MAX_PAGE)
            try:
                page = results.results_page(job=job, limit=limit, cursor=params.get("cursor"))
            except results.CursorInvalid as exc:
                raise exceptions.ValidationError({"cursor": [str(exc)]}) from None
            return Response(page)
        # The SDK reads `summary.x or data.x`: the summary is repeated at the top level.
        asynchronous = isinstance(request._request, ASGIRequest)
        return results.results_response(job=job, asynchronous=asynchronous)


class JobCancelView(APIView):
    @extend_schema(
        request=JobCancelInput,
        responses={200: answers.JobCancelled, **ERRORS},
        summary="Cancel a job",
        tags=["jobs"],
    )
    def post(self, request: Request, job_id: str) -> Response:
        data = JobCancelInput(data=request.data if isinstance(request.data, dict) else {})
        data.is_valid(raise_exception=True)
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        job = services.job_cancel(job=job)
        if job.status != JobStatus.CANCELLED:  # it had ended (or was ending) otherwise
            message = f"Job is already {job.status}; nothing to cancel."
        else:
            message = "Job cancelled."
            if data.validated_data.get("reason"):
                message = f"Job cancelled: {data.validated_data['reason']}"
        # synth-ai 0.6+ reads {job_id, status, message}; the status body follows.
        return Response({**job_status_body(job), "message": message})


class WorkflowStateView(APIView):
    @extend_schema(
        responses={200: answers.WorkflowStateAnswer, **ERRORS},
        summary="A job's state in one read",
        tags=["synth-ai"],
    )
    def get(self, request: Request, job_id: str) -> Response:
        """synth-ai 0.6+'s `EvalJob.query_workflow_state()`: the job's state in the shape it
        reads (evalhub has no workflow engine; the state is the job's)."""
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        progress = selectors.job_progress(job=job)
        return Response(
            {
                "job_id": job.id,
                "query_name": "job_state",
                "workflow_state": {
                    "job_id": job.id,
                    "run_id": None,
                    "status": job.status,
                    "progress": f"{progress['completed']}/{progress['total']} seeds completed",
                    "error": job.error,
                },
            }
        )


class NotServedView(APIView):
    """Endpoints of synth's own backend that newer synth-ai clients call and evalhub does not
    serve: a 404 that says so (the clients treat a failed upload as a warning)."""

    detail = ""

    @extend_schema(responses={404: ERROR}, summary="Not served by evalhub", tags=["synth-ai"])
    def get(self, request: Request) -> Response:
        return Response({"error": "not_served", "detail": self.detail}, status=404)

    @extend_schema(
        request=None, responses={404: ERROR}, summary="Not served by evalhub", tags=["synth-ai"]
    )
    def post(self, request: Request) -> Response:
        return self.get(request)


SEALED_KEYS_NOT_SERVED = (
    "evalhub does not store task-app keys ahead of time: send `task_app_api_key` with each job "
    "(it is encrypted at rest and sent to the task app as X-API-Key)."
)


class JobEventsView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("since_seq", int), OpenApiParameter("limit", int)],
        responses={200: answers.EventPage, **ERRORS},
        summary="Numbered events of a job after `since_seq`",
        tags=["events"],
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        since = _int_param(request, "since_seq", 0, 0, 2**31)
        limit = _int_param(request, "limit", 200, 1, 1000)
        events = selectors.job_events(job=job, since_seq=since, limit=limit + 1)
        has_more = len(events) > limit
        events = events[:limit]
        return Response(
            {
                "job_id": job.id,
                "events": [event_body(e) for e in events],
                "next_seq": events[-1].seq if events else since,
                "has_more": has_more,
            }
        )


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise exceptions.ValidationError({name: ["must be an integer"]}) from None
    if not low <= value <= high:
        raise exceptions.ValidationError({name: [f"must be between {low} and {high}"]})
    return value


class JobTracesView(APIView):
    @extend_schema(
        responses={(200, "application/zip"): answers.ZIP, **ERRORS},
        summary="Zip of per-seed traces",
        tags=["results"],
    )
    def get(self, request: Request, job_id: str):
        # Under ASGI the body must be an async iterator, or Django collects it into memory.
        asynchronous = isinstance(request._request, ASGIRequest)
        return job_traces_response(
            job=selectors.job_owned(owner=request.user, job_id=job_id), asynchronous=asynchronous
        )


def seed_run_requested(request: Request, *, job: EvalJob, seed: str) -> SeedRun:
    """The job's sample named by the path's seed and `?repeat=` (default 0), or 404."""
    try:
        seed_number = int(seed)
    except ValueError:
        raise Http404("No such seed.") from None
    if abs(seed_number) > INT64_MAX:  # no such seed can exist, and the database would overflow
        raise Http404("No such seed.")
    repeat = _int_param(request, "repeat", 0, 0, 2**31)
    seed_run = selectors.seed_run_get(job=job, seed=seed_number, repeat=repeat)
    if seed_run is None:
        raise Http404("No such seed.")
    return seed_run


class SeedTraceView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("repeat", int, description="which repeat (default 0)")],
        responses={200: answers.SeedTrace, **ERRORS},
        summary="One seed: its result row and trace document",
        tags=["results"],
    )
    def get(self, request: Request, job_id: str, seed: str):
        # Streamed call by call: a sample of thousands of calls is served in bounded memory.
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        seed_run = seed_run_requested(request, job=job, seed=seed)
        asynchronous = isinstance(request._request, ASGIRequest)
        return seed_trace_response(job=job, seed_run=seed_run, redactor=job_redactor(job=job),
                                   asynchronous=asynchronous)  # fmt: skip
