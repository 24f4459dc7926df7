"""What the job's exports in other tools' formats answer, for the OpenAPI document."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers as s

from jobs.api.answers import ObjectField


class InspectLog(s.Serializer):
    """The top of an Inspect AI eval log (its JSON format); each sample has `id` (the seed),
    `epoch` (the repeat + 1), `messages`, `output`, `scores`, `model_usage`, `error`."""

    version = s.IntegerField()
    status = s.CharField()
    eval = ObjectField(example={"task": "demo", "model": "openai/gpt-4o-mini", "task_id": "eval-"})
    plan = ObjectField(example={"name": "plan", "steps": [{"solver": "synth"}]})
    results = ObjectField(example={"total_samples": 3, "completed_samples": 3, "scores": []})
    stats = ObjectField(example={"started_at": "2026-11-25T10:00:00Z", "model_usage": {}})
    samples = s.ListField(child=ObjectField(example={"id": 0, "epoch": 1, "scores": {}}))


INSPECT_LOG = OpenApiResponse(
    InspectLog,
    description="the job as an Inspect AI eval log (its JSON format: `eval`, `plan`, `results`,"
    " `stats`, `samples`), which `inspect_ai.log.read_eval_log` reads and `inspect view` shows",
)
