"""The public eval-job API (../shared/contracts/eval-jobs-api.md). One view per operation:
parse with an input serializer, call a service or selector, render."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlparse

from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404
from django.utils.crypto import salted_hmac
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from jobs import selectors, services
from jobs.fields import INT64_MAX
from jobs.inputs import JobCancelInput, JobCreateInput
from jobs.models import EvalJob, JobStatus
from jobs.public import event_body, job_status_body
from traces import totals
from traces.documents import seed_trace
from traces.export import job_traces_response
from traces.redaction import job_redactor

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


def _owned_job(request: Request, job_id: str) -> EvalJob:
    return selectors.job_owned(owner=request.user, job_id=job_id)


# What the schema says of answers: every error has the same JSON shape.
OBJECT = OpenApiTypes.OBJECT
ERROR = inline_serializer(
    "Error",
    {
        "error": serializers.CharField(),
        "detail": serializers.CharField(),
        "fields": serializers.DictField(required=False),
    },
)
ERRORS = {400: ERROR, 401: ERROR, 404: ERROR}


# --- POST /api/eval/jobs --------------------------------------------------------------------


IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")


class IdempotencyKeyReused(exceptions.ValidationError):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    error_code = "idempotency_key_reused"


def _idempotency_key(request: Request) -> str:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return ""
    if not IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise exceptions.ValidationError(
            {IDEMPOTENCY_HEADER: ["must be 1 to 255 printable ASCII characters, no spaces"]}
        )
    return key


def _fingerprint(body: dict[str, Any]) -> str:
    """A keyed hash of the request (the body holds the task app's key: never stored plain)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return salted_hmac("evalhub.idempotency", canonical, algorithm="sha256").hexdigest()


class JobListCreateView(APIView):
    @extend_schema(
        request=JobCreateInput,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                str,
                OpenApiParameter.HEADER,
                description="retries with the same key return the job the first request made "
                "(200, `Idempotent-Replayed: true`) instead of creating another",
            )
        ],  # fmt: skip
        responses={201: OBJECT, 200: OBJECT, **ERRORS, 413: ERROR, 422: ERROR},
        summary="Create an eval job",
    )
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"body": ["must be a JSON object"]})
        key = _idempotency_key(request)
        data = JobCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        if not key:
            job = services.job_create(owner=request.user, spec=data.to_spec())
            return Response(job_status_body(job), status=status.HTTP_201_CREATED)
        try:
            job, created = services.job_create_once(
                owner=request.user, spec=data.to_spec(), idempotency_key=key,
                fingerprint=_fingerprint(request.data),
            )  # fmt: skip
        except services.IdempotencyConflict as exc:
            raise IdempotencyKeyReused(
                {IDEMPOTENCY_HEADER: [f"was used for a different request (job {exc.job.id})"]}
            ) from None
        if created:
            return Response(job_status_body(job), status=status.HTTP_201_CREATED)
        return Response(job_status_body(job), headers={"Idempotent-Replayed": "true"})

    @extend_schema(
        parameters=[
            OpenApiParameter("limit", int, description="page size, 1-200 (default 50)"),
            OpenApiParameter("status", str, enum=list(JobStatus.values)),
            OpenApiParameter("cursor", str, description="from `next_cursor` of the previous page"),
        ],
        responses={200: OBJECT, **ERRORS},
        summary="List your eval jobs, newest first",
    )
    def get(self, request: Request) -> Response:
        status_filter = request.query_params.get("status") or None
        if status_filter and status_filter not in JobStatus.values:
            raise exceptions.ValidationError(
                {"status": [f"must be one of {', '.join(JobStatus.values)}"]}
            )
        paginator = JobCursorPagination()
        page = paginator.paginate_queryset(
            selectors.job_list(owner=request.user, status=status_filter), request, view=self
        )
        progress = selectors.job_progress_many(jobs=page)
        jobs = [job_status_body(job, progress[job.id]) for job in page]
        next_link = paginator.get_next_link()
        return Response(
            {
                "jobs": jobs,
                "next": next_link,
                "next_cursor": paginator.cursor_param_value(next_link),
                "has_more": next_link is not None,
            }
        )


class JobCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get("limit")
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            raise exceptions.ValidationError({"limit": ["must be an integer"]}) from None
        if not 1 <= size <= self.max_page_size:
            raise exceptions.ValidationError(
                {"limit": [f"must be between 1 and {self.max_page_size}"]}
            )
        return size

    def cursor_param_value(self, link: str | None) -> str | None:
        if not link:
            return None
        return parse_qs(urlparse(link).query).get(self.cursor_query_param, [None])[0]


class JobDetailView(APIView):
    @extend_schema(responses={200: OBJECT, **ERRORS}, summary="Status and progress of a job")
    def get(self, request: Request, job_id: str) -> Response:
        return Response(job_status_body(_owned_job(request, job_id)))


class JobResultsView(APIView):
    @extend_schema(responses={200: OBJECT, **ERRORS}, summary="Summary and per-seed results")
    def get(self, request: Request, job_id: str) -> Response:
        job = _owned_job(request, job_id)
        summary, rows = totals.job_results(job=job)
        # The SDK reads `summary.x or data.x`: repeat the summary at the top level.
        body = {
            **summary,
            "job_id": job.id,
            "task_app_kind": job.task_app_kind,
            "status": job.status,
            "error": job.error,
            "summary": summary,
            "results": rows,
        }
        return Response(body)


class JobCancelView(APIView):
    @extend_schema(
        request=JobCancelInput, responses={200: OBJECT, **ERRORS}, summary="Cancel a job"
    )
    def post(self, request: Request, job_id: str) -> Response:
        data = JobCancelInput(data=request.data if isinstance(request.data, dict) else {})
        data.is_valid(raise_exception=True)
        job = _owned_job(request, job_id)
        already = job.is_terminal
        job = services.job_cancel(job=job)
        if already and job.status != JobStatus.CANCELLED:
            message = f"Job is already {job.status}; nothing to cancel."
        else:
            message = "Job cancelled."
            if data.validated_data.get("reason"):
                message = f"Job cancelled: {data.validated_data['reason']}"
        # synth-ai 0.6+ reads {job_id, status, message}; the status body follows.
        return Response({**job_status_body(job), "message": message})


class WorkflowStateView(APIView):
    @extend_schema(responses={200: OBJECT, **ERRORS}, summary="A job's state in one read")
    def get(self, request: Request, job_id: str) -> Response:
        """synth-ai 0.6+'s `EvalJob.query_workflow_state()`: the job's state in the shape it
        reads (evalhub has no workflow engine; the state is the job's)."""
        job = _owned_job(request, job_id)
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

    @extend_schema(responses={404: ERROR}, summary="Not served by evalhub")
    def get(self, request: Request) -> Response:
        return Response({"error": "not_served", "detail": self.detail}, status=404)

    @extend_schema(request=None, responses={404: ERROR}, summary="Not served by evalhub")
    def post(self, request: Request) -> Response:
        return self.get(request)


SEALED_KEYS_NOT_SERVED = (
    "evalhub does not store task-app keys ahead of time: send `task_app_api_key` with each job "
    "(it is encrypted at rest and sent to the task app as X-API-Key)."
)


class JobEventsView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("since_seq", int), OpenApiParameter("limit", int)],
        responses={200: OBJECT, **ERRORS},
        summary="Numbered events of a job after `since_seq`",
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = _owned_job(request, job_id)
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
        responses={(200, "application/zip"): bytes, **ERRORS}, summary="Zip of per-seed traces"
    )
    def get(self, request: Request, job_id: str):
        # Under ASGI the body must be an async iterator, or Django collects it into memory.
        asynchronous = isinstance(request._request, ASGIRequest)
        return job_traces_response(job=_owned_job(request, job_id), asynchronous=asynchronous)


class SeedTraceView(APIView):
    @extend_schema(
        responses={200: OBJECT, **ERRORS}, summary="One seed: its result row and trace document"
    )
    def get(self, request: Request, job_id: str, seed: str) -> Response:
        job = _owned_job(request, job_id)
        try:
            seed_number = int(seed)
        except ValueError:
            raise Http404("No such seed.") from None
        if abs(seed_number) > INT64_MAX:  # no such seed can exist, and the database would overflow
            raise Http404("No such seed.")
        seed_run = selectors.seed_run_get(job=job, seed=seed_number)
        if seed_run is None:
            raise Http404("No such seed.")
        row, document = seed_trace(job=job, seed_run=seed_run, redactor=job_redactor(job=job))
        return Response({"job_id": job.id, "seed": seed_run.seed, "result": row, "trace": document})
