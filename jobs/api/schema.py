"""What the OpenAPI schema says of the API's own input fields: their bounds, read from the
field (and so from settings), so a client generated from the schema sends what is accepted.
Registered with drf-spectacular as it loads this module's hooks (SPECTACULAR_SETTINGS), before
it maps a field: only a process that builds the schema imports drf-spectacular, not a worker."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)

from jobs.fields import INT64_MAX


def _bounds(field: Any) -> dict[str, Any]:
    bounds = {"minimum": field.min_value, "maximum": field.max_value}
    return {k: v for k, v in bounds.items() if v is not None}


class StrictIntegerSchema(OpenApiSerializerFieldExtension):
    target_class = "jobs.fields.StrictIntegerField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "integer", "format": "int64", **_bounds(self.target)}


class StrictNumberSchema(OpenApiSerializerFieldExtension):
    target_class = "jobs.fields.StrictNumberField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "number", **_bounds(self.target)}


class SeedListSchema(OpenApiSerializerFieldExtension):
    target_class = "jobs.fields.SeedListField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "array",
            "items": {"type": "integer", "format": "int64", "minimum": -INT64_MAX,
                      "maximum": INT64_MAX},
            "minItems": 1,
            "maxItems": settings.EVALHUB_MAX_SEEDS,
            "uniqueItems": True,
        }  # fmt: skip


class TaskAppUrlSchema(OpenApiSerializerFieldExtension):
    target_class = "jobs.fields.TaskAppUrlField"

    def map_serializer_field(self, auto_schema, direction):
        return {
            "type": "string",
            "format": "uri",
            "maxLength": self.target.max_length,
            "pattern": r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$",
        }


# What the docs show of the request's objects (ReDoc would show `{"property1": null, ...}`).
REQUEST_EXAMPLES = {
    "policy": {"model": "gpt-4o-mini", "provider": "openai", "temperature": 0.0},
    "env_config": {"split": "test"},
    "verifier_config": {"enabled": True, "reward_source": "fused", "weight_env": 0.5,
                        "weight_outcome": 0.5, "backend_model": "gpt-4o-mini"},
    "rollout_limits": {"max_llm_calls": 20, "max_tokens": 50000, "max_cost_usd": 0.05},
    "metadata": {"team": "evals", "commit": "3f2a1c9"},
}  # fmt: skip


class JsonObjectSchema(OpenApiSerializerFieldExtension):
    target_class = "jobs.fields.JsonObjectField"

    def map_serializer_field(self, auto_schema, direction):
        example = REQUEST_EXAMPLES.get(self.target.field_name, {})
        return {"type": "object", "additionalProperties": {}, "example": example}


class ObjectSchema(OpenApiSerializerFieldExtension):
    """An object of the caller's own keys in an answer, shown by its example."""

    target_class = "jobs.api.answers.ObjectField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "object", "additionalProperties": {}, "example": self.target.example}


class ApiKeySchema(OpenApiAuthenticationExtension):
    target_class = "jobs.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "an evalhub API key"}


# --- hooks (SPECTACULAR_SETTINGS) -----------------------------------------------------------


def api_paths_only(endpoints, **kwargs):
    """Only the operations under /api/: the aliases mounted at the root for synth-ai 0.6-0.7
    (`/eval/jobs/{job_id}`, its events) are the same operations (the `synth-ai` tag says so)."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith("/api/")]


EVENT_STREAM = "/api/eval/jobs/{job_id}/events/stream"
EVENT_STREAM_EXAMPLE = (
    "retry: 2000\n\n"
    "id: 2\nevent: eval.policy.seed.completed\n"
    'data: {"seq": 2, "job_id": "eval-…", "type": "eval.policy.seed.completed", "message": "", '
    '"data": {"seed": 1, "repeat": 0, "score": 1.0, "seed_status": "succeeded", '
    '"completed": 1, "total": 3}, "created_at": "2026-01-01T00:00:00.000Z"}\n\n'
    ": keep-alive\n\n"
    'event: sse.stream.ended\ndata: {"type": "sse.stream.ended", "job_id": "eval-…", '
    '"message": "stream ended"}\n\n'
)


# The groups of operations, in the order /api/docs shows them.
TAGS = [
    {"name": "jobs", "description": "Create, list, read and cancel eval jobs."},
    {"name": "results", "description": "A job's summary and per-sample results, one sample's "
     "trace, the zip of every trace, CSV and SFT exports."},
    {"name": "events", "description": "A job's numbered events: a page at a time, or as a "
     "server-sent-event stream that ends with the job."},
    {"name": "reruns and comparisons", "description": "A new job from a finished one (its "
     "failed seeds again, or re-judged) and two jobs compared seed by seed."},
    {"name": "human review", "description": "People's labels of samples (a verdict, a "
     "corrected score, notes, tags), how often the task app, the judge and people agree, and "
     "a job's score taken from the labels: see docs/review.md."},
    {"name": "synth-ai", "description": "What synth-ai's clients (0.4.4 to 0.7.3) call beside "
     "the above. They also follow a job's status and events without the `/api` prefix "
     "(`/eval/jobs/{job_id}`, `.../events`, `.../events/stream`): the same operations, not "
     "listed twice."},
]  # fmt: skip


def schema_completed(result, generator, request, public):
    """The event stream (jobs/api/sse.py) is an async Django view, which drf-spectacular does
    not see: its operation is written here; and the groups of operations described (TAGS)."""
    result["tags"] = TAGS
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    result["paths"][EVENT_STREAM] = {
        "get": {
            "operationId": "api_eval_jobs_events_stream",
            "summary": "A job's events as server-sent events, until it ends",
            "description": (
                "Each event is sent as `id: <seq>`, `event: <type>` and `data: <the event as "
                "JSON>` (the shape of an event of `GET .../events`). A client that reconnects "
                "with `Last-Event-ID` (or asks with `since_seq`) gets only what follows. A "
                "comment line keeps an idle stream open; after the job's terminal event the "
                "stream sends `sse.stream.ended` (no id) and ends. Also served without the "
                "`/api` prefix, for synth-ai 0.6-0.7."
            ),
            "tags": ["events"],
            "parameters": [
                {"in": "path", "name": "job_id", "required": True, "schema": {"type": "string"}},
                {
                    "in": "query",
                    "name": "since_seq",
                    "schema": {"type": "integer", "minimum": 0},
                    "description": "only events after this one",
                },
                {
                    "in": "header",
                    "name": "Last-Event-ID",
                    "schema": {"type": "string"},
                    "description": "as a reconnecting EventSource sends it: like `since_seq`",
                },
            ],  # fmt: skip
            "security": [{"apiKey": []}],
            "responses": {
                "200": {
                    "description": "the event stream",
                    "content": {
                        "text/event-stream": {
                            "schema": {"type": "string"},
                            "example": EVENT_STREAM_EXAMPLE,
                        }
                    },
                },
                "400": {"description": "a bad `since_seq` or `Last-Event-ID`", "content": error},
                "401": {"description": "no API key, or a wrong one", "content": error},
                "404": {"description": "no such job, or another account's", "content": error},
            },
        }
    }
    return result
