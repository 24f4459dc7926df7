"""A job made from a request, `POST /api/eval/jobs` and `POST /api/eval/jobs/{id}/replay`
alike: once per `Idempotency-Key` of the account when the request carries one (docs/api.md)."""

from __future__ import annotations

import json
import re
from typing import Any

from django.utils.crypto import salted_hmac
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import services
from jobs.models import EvalJob
from jobs.public import job_status_body, job_warnings
from jobs.services import JobSpec

IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    str,
    OpenApiParameter.HEADER,
    description="retries with the same key return the job the first request made "
    "(200, `Idempotent-Replayed: true`) instead of creating another",
)


class IdempotencyKeyReused(exceptions.ValidationError):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    error_code = "idempotency_key_reused"


def idempotency_key(request: Request) -> str:
    """The request's key ("" without one); a malformed key is a 400 naming the header."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return ""
    if not IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise exceptions.ValidationError(
            {IDEMPOTENCY_HEADER: ["must be 1 to 255 printable ASCII characters, no spaces"]}
        )
    return key


def _fingerprint(request: dict[str, Any]) -> str:
    """A keyed hash of the request (the body holds the task app's key: never stored plain)."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return salted_hmac("evalhub.idempotency", canonical, algorithm="sha256").hexdigest()


def job_made(request: Request, *, key: str, spec: JobSpec, asked: dict[str, Any]) -> Response:
    """The job of `spec` made for the request's owner, answered 201. With a `key` made once:
    a retry of the same request (`asked`: what identifies it) gets the job the key made first
    (200, `Idempotent-Replayed: true`), another request with the key a 422 naming that job."""
    if not key:
        job = services.job_create(owner=request.user, spec=spec)
        return _made(job, spec.warnings, status.HTTP_201_CREATED)
    try:
        job, created = services.job_create_once(
            owner=request.user, spec=spec, idempotency_key=key, fingerprint=_fingerprint(asked)
        )
    except services.IdempotencyConflict as exc:
        raise IdempotencyKeyReused(
            {IDEMPOTENCY_HEADER: [f"was used for a different request (job {exc.job.id})"]}
        ) from None
    if created:
        return _made(job, spec.warnings, status.HTTP_201_CREATED)
    response = _made(job, job_warnings(job), status.HTTP_200_OK)
    response["Idempotent-Replayed"] = "true"
    return response


def _made(job: EvalJob, warnings: list[dict[str, Any]], code: int) -> Response:
    """The job's status and `warnings`: the body's fields evalhub did not know, each with the
    closest known one (a typo would otherwise silently lose its setting)."""
    return Response({**job_status_body(job), "warnings": warnings}, status=code)
