"""`POST /api/eval/jobs/{id}/judge`: re-judge a finished job with another verifier_config."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import selectors
from jobs.api import answers
from jobs.api.answers import ERROR, ERRORS
from jobs.api.inputs import JobCreateInput, body_parsed
from jobs.fields import JsonObjectField
from jobs.public import job_status_body
from jobs.verifier.rejudge import NotJudgeable, job_rejudge


class JobJudgeInput(serializers.Serializer):
    verifier_config = JsonObjectField()

    def validate_verifier_config(self, value):
        return JobCreateInput.validate_verifier_config(self, value)


class NotJudgeableError(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "not_judgeable"


class JobJudgeView(APIView):
    @extend_schema(
        request=JobJudgeInput,
        responses={201: answers.Job, **ERRORS, 409: ERROR},
        summary="Re-judge a finished job's rollouts as a new job (judged_from)",
        tags=["reruns and comparisons"],
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        data = body_parsed(request.data, JobJudgeInput)
        try:
            new = job_rejudge(job=job, verifier_config=data.validated_data["verifier_config"])
        except NotJudgeable as exc:
            raise NotJudgeableError(str(exc)) from None
        return Response(job_status_body(new), status=status.HTTP_201_CREATED)
