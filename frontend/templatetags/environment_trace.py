"""The environment's side of a seed's trace on the seed page: each tool the agent loop (or an
OpenEnv rollout tool) executed, with its arguments, result, duration, error and reward, every
value through the job's redactor."""

from __future__ import annotations

import json
from typing import Any

from django import template

from traces.redaction import job_redactor

register = template.Library()


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, default=str)


@register.simple_tag
def tool_executions(seed_run: Any, job: Any) -> list[dict[str, Any]]:
    trace = getattr(seed_run, "task_trace", None)
    listed = trace.get("tool_executions") if isinstance(trace, dict) else None
    if not isinstance(listed, list):
        return []
    redacted = job_redactor(job=job).value(listed)
    return [
        {
            **e,
            "arguments_shown": _shown(e.get("arguments")),
            "result_shown": _shown(e.get("result")),
        }
        for e in redacted
        if isinstance(e, dict)
    ]
