"""The API fuzzed from its own OpenAPI schema (schemathesis): whatever a client sends, no 5xx,
and every answer keeps to the schema. Bounded: a fixed number of examples per operation."""

from __future__ import annotations

import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from jobs.apikeys import api_key_create_for_username
from tests.support import servers

EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]


@pytest.fixture
def fuzzed_web(transactional_db):
    """A web process of its own: its jobs go to a queue no worker reads, and a job has at most
    50 seeds, so the fuzzer's jobs stay cheap."""
    web, base = servers.start_web(
        EVALHUB_CELERY_QUEUE=f"evalhub-fuzz-{uuid.uuid4().hex[:8]}", EVALHUB_MAX_SEEDS="50"
    )
    yield base
    web.stop()


def test_no_request_gets_a_5xx_or_an_answer_outside_the_schema_and_jobs_get_made(fuzzed_web):
    _, key = api_key_create_for_username(username="fuzz")
    headers = {"Authorization": f"Bearer {key}"}
    # The event stream stays open until its job ends: not something to fuzz request by request.
    schema = schemathesis.openapi.from_url(f"{fuzzed_web}/api/schema").exclude(
        path_regex=r"/stream$"
    )
    failures: dict[str, str] = {}
    created: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)  # fmt: skip
        def fuzz(case):
            response = case.call_and_validate(
                base_url=fuzzed_web, headers=headers, checks=CHECKS, timeout=30
            )
            if case.method == "POST" and case.path == "/api/eval/jobs":
                if response.status_code == 201:
                    created.append(response.json()["job_id"])

        try:
            fuzz()
        except Exception as exc:  # every operation is fuzzed; all failures are reported
            failures[operation.label] = str(exc)[:2000]
    assert failures == {}
    # The schema says what a valid create is well enough that generated bodies make jobs.
    assert created, "no generated request created a job"
