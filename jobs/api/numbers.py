"""The API of a job's numbers beyond its results: rerun, compare two jobs, and the results as
CSV and the passing conversations as JSONL (jobs.api.jobs has the core operations)."""

from __future__ import annotations

import math

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import selectors
from jobs.api import answers
from jobs.api.answers import ERROR, ERRORS
from jobs.api.export_answers import INSPECT_LOG
from jobs.api.inputs import JobRerunInput, body_parsed
from jobs.models import Verdict
from jobs.public import job_status_body
from jobs.reruns import RerunRefused, job_rerun
from traces.calls import reuse
from traces.results import comparison, exports, inspect_log


class JobNotOver(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "job_not_finished"


class JobRerunView(APIView):
    @extend_schema(
        request=JobRerunInput,
        responses={201: answers.Job, **ERRORS, 409: ERROR},
        summary="Rerun a finished job's failed seeds (reusing its successes), all, or some",
        tags=["reruns and comparisons"],
    )
    def post(self, request: Request, job_id: str) -> Response:
        data = body_parsed(request.data, JobRerunInput)  # none at all is {}: the defaults
        parent = selectors.job_owned(owner=request.user, job_id=job_id)
        try:
            job = job_rerun(
                parent=parent,
                seeds=data.validated_data.get("seeds", "failed"),
                policy=data.validated_data.get("policy"),
                copy_attempt_children=reuse.llm_calls_copy,
            )
        except RerunRefused as exc:
            if exc.conflict:
                raise JobNotOver(exc.message) from None
            raise exceptions.ValidationError({exc.field: [exc.message]}) from None
        return Response(job_status_body(job), status=status.HTTP_201_CREATED)


class CompareView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("base", str, required=True, description="the job compared against"),
            OpenApiParameter("candidate", str, required=True, description="the job compared"),
        ],
        responses={200: answers.Comparison, **ERRORS},
        summary="Compare two jobs seed by seed",
        tags=["reruns and comparisons"],
    )
    def get(self, request: Request) -> Response:
        ids = {name: request.query_params.get(name) or "" for name in ("base", "candidate")}
        missing = {name: ["is required"] for name, value in ids.items() if not value}
        if missing:
            raise exceptions.ValidationError(missing)
        base = selectors.job_owned(owner=request.user, job_id=ids["base"], field="base")
        candidate = selectors.job_owned(
            owner=request.user, job_id=ids["candidate"], field="candidate"
        )
        return Response(comparison.jobs_compare(base=base, candidate=candidate))


def _attachment(lines, *, content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "private, no-store"
    return response


class JobResultsCsvView(APIView):
    @extend_schema(
        responses={(200, "text/csv"): answers.CSV, **ERRORS},
        summary="Results, one CSV row per sample",
        tags=["results"],
    )
    def get(self, request: Request, job_id: str) -> StreamingHttpResponse:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        lines = list(exports.results_csv_lines(job=job))
        return _attachment(lines, content_type="text/csv", filename=f"{job.id}-results.csv")


class JobSftExportView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("min_score", float, description="only samples scoring at least this"),
                    OpenApiParameter("verdict", str, enum=Verdict.values,
                                     description="only samples people labelled so")],
        responses={(200, "application/jsonl"): answers.JSONL, **ERRORS},
        summary="Conversations of the passing samples as chat-format JSONL",
        tags=["results"],
    )  # fmt: skip
    def get(self, request: Request, job_id: str) -> StreamingHttpResponse:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        raw = request.query_params.get("min_score")
        min_score = None
        if raw not in (None, ""):
            try:
                min_score = float(raw)
            except ValueError:
                min_score = math.nan
            if not math.isfinite(min_score):
                raise exceptions.ValidationError({"min_score": ["must be a finite number"]})
        verdict = request.query_params.get("verdict") or None
        if verdict is not None and verdict not in Verdict.values:
            raise exceptions.ValidationError(
                {"verdict": [f"must be one of {', '.join(Verdict.values)}"]}
            )
        lines = list(exports.sft_lines(job=job, min_score=min_score, verdict=verdict))
        return _attachment(lines, content_type="application/jsonl", filename=f"{job.id}-sft.jsonl")


class JobInspectExportView(APIView):
    @extend_schema(
        responses={(200, "application/json"): INSPECT_LOG, **ERRORS},
        summary="The job as an Inspect AI eval log (`inspect view`, `read_eval_log`)",
    )
    def get(self, request: Request, job_id: str) -> StreamingHttpResponse:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        chunks = inspect_log.inspect_log_chunks(job=job)
        return _attachment(
            chunks, content_type="application/json", filename=inspect_log.inspect_log_filename(job)
        )
