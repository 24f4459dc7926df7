"""What the OpenAPI schema says of the API's own input fields: their bounds, read from the
field (and so from settings), so a client generated from the schema sends what is accepted.
Registered with drf-spectacular when the app is ready (jobs.apps)."""

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


class ApiKeySchema(OpenApiAuthenticationExtension):
    target_class = "jobs.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "an evalhub API key"}
