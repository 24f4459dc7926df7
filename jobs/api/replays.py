"""The API of replays (docs/replay.md): a job made a replay of an earlier one, from
`POST /api/eval/jobs` with `replay`, or `POST /api/eval/jobs/{id}/replay` with overrides."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import selectors
from jobs.api import answers
from jobs.api.answers import ERROR, ERRORS
from jobs.api.idempotency import IDEMPOTENCY_PARAMETER, idempotency_key, job_made
from jobs.api.inputs import JobCreateInput, JobReplayInput, body_parsed
from jobs.api.numbers import JobNotOver
from jobs.replays import ReplayRefused, replay_body, replay_spec
from jobs.services import JobSpec


def replay_checked(owner, data: JobCreateInput, spec: JobSpec) -> JobSpec:
    """The spec of a validated create body, a replay when the body asks for one: the job it
    names must be the owner's (else a 400 naming `replay.job_id`)."""
    replay = data.validated_data.get("replay")
    if not replay:
        return spec
    try:
        return replay_spec(owner=owner, spec=spec, replay=replay)
    except ReplayRefused as exc:
        raise exceptions.ValidationError(exc.fields()) from None


class JobReplayView(APIView):
    @extend_schema(
        request=JobReplayInput,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            201: answers.JobCreated,
            200: answers.JobCreated,
            **ERRORS,
            409: ERROR,
            422: ERROR,
        },
        summary="Replay an ended job against its recorded LLM answers",
        tags=["reruns and comparisons"],
    )
    def post(self, request: Request, job_id: str) -> Response:
        key = idempotency_key(request)
        given: dict[str, Any] = dict(body_parsed(request.data or {}, JobReplayInput).initial_data)
        on_miss = given.pop("on_miss", None)
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        if not job.is_terminal:
            raise JobNotOver(f"job is {job.status}; replay it once it ends")
        try:
            body = {**replay_body(job), **given}
        except ReplayRefused as exc:
            raise exceptions.ValidationError(exc.fields()) from None
        body["replay"] = {"job_id": job.id, **({"on_miss": on_miss} if on_miss else {})}
        data = body_parsed(body, JobCreateInput)
        spec = replay_checked(request.user, data, data.to_spec())
        # The same key on a replay of another job, or on a create, is another request.
        asked = {"replay_of": job.id, "body": request.data or {}}
        return job_made(request, key=key, spec=spec, asked=asked)
