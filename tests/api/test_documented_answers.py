"""What /api/docs says each operation answers, checked against real answers: a job run to the
end by a real worker (a real task app, the interceptor, the fake provider), then every operation
of the schema called on it, each answer validated against the schema documented for its status
and content type (jsonschema). An operation added to the API without a call here fails the test.
"""

from __future__ import annotations

import json

import httpx
import pytest
from django.core.management import call_command
from jsonschema import Draft202012Validator

from jobs.apikeys import api_key_create_for_username
from tests.support import servers
from tests.support.jobs import api_job_create, api_job_wait
from tests.test_end_to_end import agent_app  # noqa: F401  (the task app these jobs run on)

JOBS = "/api/eval/jobs"


def openapi_schema(base: str) -> dict:
    answer = httpx.get(f"{base}/api/schema", params={"format": "json"}, timeout=30)
    assert answer.status_code == 200
    return answer.json()


def as_json_schema(node):
    """OpenAPI 3.0's `nullable` as JSON Schema's null type; every other keyword is the same.
    An object that lists its properties gets no others: an undocumented field fails too."""
    if isinstance(node, list):
        return [as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: as_json_schema(value) for key, value in node.items() if key != "nullable"}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def documented(schema: dict, method: str, template: str, code: int) -> tuple[str, dict | None]:
    """The content type and JSON Schema documented for this answer (None: not JSON)."""
    responses = schema["paths"][template][method.lower()]["responses"]
    assert str(code) in responses, f"{method} {template} answered {code}, not documented"
    content = responses[str(code)].get("content") or {}
    assert content, f"{method} {template} {code} documents no content"
    media, body = next(iter(content.items()))
    if media != "application/json":
        return media, None
    return media, {**as_json_schema(body["schema"]), "components": as_json_schema(
        schema["components"])}  # fmt: skip


@pytest.fixture
def finished_job(transactional_db, celery_queue, fake_upstream, worker_factory):
    """A web process and a worker; a job with three seeds run to the end."""
    web, base = servers.start_web(
        EVALHUB_CELERY_QUEUE=celery_queue,
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY="sk-server-key",
    )
    worker_factory(EVALHUB_PUBLIC_URL=base)
    _, key = api_key_create_for_username(username="documented")
    headers = {"Authorization": f"Bearer {key}"}
    with servers.serve_asgi(agent_app()) as task_app_url:
        body = {"task_app_url": task_app_url, "seeds": [0, 1, 2], "name": "documented",
                "policy": {"model": "gpt-4o-mini", "provider": "openai"}}  # fmt: skip
        job_id = api_job_create(base, headers, body)
        assert api_job_wait(base, headers, job_id)["status"] == "completed"
        yield base, headers, job_id, body
    web.stop()


def calls(job_id: str, body: dict) -> list[tuple[str, str, str, dict, int]]:
    """(method, documented path, path, request, status expected): every operation, and the
    error shapes (400, 401, 404) once each."""
    job = f"{JOBS}/{{job_id}}"
    at = f"{JOBS}/{job_id}"
    return [
        ("POST", JOBS, JOBS, {"json": {**body, "max_concurent": 2}}, 201),
        ("POST", JOBS, JOBS, {"json": {"seeds": []}}, 400),
        ("GET", JOBS, JOBS, {"params": {"limit": 2}}, 200),
        ("GET", job, at, {}, 200),
        ("GET", job, f"{JOBS}/eval-nosuchjob", {}, 404),
        # A label and people's score first: the results below carry them.
        ("POST", f"{job}/seeds/{{seed}}/labels", f"{at}/seeds/1/labels",
         {"json": {"verdict": "fail", "score": 0.5, "notes": "off by one", "tags": ["env-bug"]}},
         201),
        ("GET", f"{job}/seeds/{{seed}}/labels", f"{at}/seeds/1/labels", {}, 200),
        ("PUT", f"{job}/reward_source", f"{at}/reward_source",
         {"json": {"reward_source": "human_else_task_app"}}, 200),
        ("GET", f"{job}/labels", f"{at}/labels", {}, 200),
        ("GET", f"{job}/results", f"{at}/results", {}, 200),
        ("GET", f"{job}/results", f"{at}/results", {"params": {"limit": 2}}, 200),
        ("GET", f"{job}/traces", f"{at}/traces", {}, 200),
        ("GET", f"{job}/seeds/{{seed}}", f"{at}/seeds/1", {}, 200),
        ("GET", f"{job}/events", f"{at}/events", {}, 200),
        ("GET", f"{job}/events/stream", f"{at}/events/stream", {}, 200),
        ("POST", f"{job}/cancel", f"{at}/cancel", {"json": {"reason": "done"}}, 200),
        ("POST", f"{job}/rerun", f"{at}/rerun", {"json": {"seeds": "all"}}, 201),
        ("POST", f"{job}/replay", f"{at}/replay", {"json": {"on_miss": "call", "seeds": [1]}},
         201),
        ("POST", f"{job}/judge", f"{at}/judge",
         {"json": {"verifier_config": {"enabled": True, "reward_source": "verifier"}}}, 201),
        ("GET", f"{job}/results.csv", f"{at}/results.csv", {}, 200),
        ("GET", f"{job}/export/sft.jsonl", f"{at}/export/sft.jsonl", {}, 200),
        ("GET", f"{job}/export/inspect", f"{at}/export/inspect", {}, 200),
        ("GET", "/api/eval/compare", "/api/eval/compare",
         {"params": {"base": job_id, "candidate": job_id}}, 200),
        ("GET", "/api/jobs/{job_id}/workflow-state", f"/api/jobs/{job_id}/workflow-state", {},
         200),
        ("GET", "/api/v1/crypto/public-key", "/api/v1/crypto/public-key", {}, 404),
        ("POST", "/api/v1/crypto/public-key", "/api/v1/crypto/public-key", {}, 404),
        ("GET", "/api/v1/env-keys", "/api/v1/env-keys", {}, 404),
        ("POST", "/api/v1/env-keys", "/api/v1/env-keys", {}, 404),
    ]  # fmt: skip


@pytest.mark.worker
def test_every_operation_answers_what_its_documented_schema_says(finished_job):
    base, headers, job_id, body = finished_job
    schema = openapi_schema(base)
    table = calls(job_id, body)
    documented_operations = {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert documented_operations == {(m, p) for m, p, *_ in table}
    problems: dict[str, list[str]] = {}
    for method, template, path, request, code in table:
        answer = httpx.request(method, f"{base}{path}", headers=headers, timeout=60, **request)
        assert answer.status_code == code, (method, path, answer.text[:500])
        media, json_schema = documented(schema, method, template, code)
        label = f"{method} {path} {code}"
        assert answer.headers["content-type"].split(";")[0] == media, label
        if json_schema is not None:
            errors = Draft202012Validator(json_schema).iter_errors(answer.json())
            found = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300] for e in errors]
            if found:
                problems[label] = found[:10]
        if media == "text/event-stream":  # each of the job's events as GET .../events has it
            event = {"$ref": "#/components/schemas/Event", "components": as_json_schema(
                schema["components"])}  # fmt: skip
            events = [json.loads(block.split("data: ", 1)[1]) for block in
                      answer.text.split("\n\n") if block.startswith("id: ")]  # fmt: skip
            assert len(events) >= 5, answer.text
            for sent in events:
                assert list(Draft202012Validator(event).iter_errors(sent)) == [], sent
    # Without a key, the same shape of error (401) on every operation.
    answer = httpx.get(f"{base}{JOBS}", timeout=30)
    _, json_schema = documented(schema, "GET", JOBS, 401)
    assert list(Draft202012Validator(json_schema).iter_errors(answer.json())) == []
    assert problems == {}, json.dumps(problems, indent=1)


def test_the_schema_is_valid_and_generated_without_a_warning(capsys):
    """`manage.py spectacular --validate --fail-on-warn`: the schema is valid OpenAPI, and every
    operation's answers are typed (drf-spectacular warns about what it cannot type)."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")
    assert "Warning" not in capsys.readouterr().err
