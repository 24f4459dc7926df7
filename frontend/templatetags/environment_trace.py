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


def _from_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Tool calls and their results from a trajectory's chat messages (what an Atropos
    environment returns through evalhub-atropos): no duration or reward there."""
    calls: dict[Any, dict[str, Any]] = {}
    step = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and message.get("tool_calls"):
            step += 1
            for call in message["tool_calls"]:
                if not isinstance(call, dict):
                    continue
                function = call.get("function") or {}
                calls[call.get("id")] = {
                    "step": step, "call_id": call.get("id"), "name": function.get("name"),
                    "arguments": function.get("arguments"), "result": None, "error": None,
                    "duration_ms": None,
                }  # fmt: skip
        elif message.get("role") == "tool" and message.get("tool_call_id") in calls:
            calls[message["tool_call_id"]]["result"] = message.get("content")
    return list(calls.values())


@register.simple_tag
def tool_executions(seed_run: Any, job: Any) -> list[dict[str, Any]]:
    trace = getattr(seed_run, "task_trace", None)
    if not isinstance(trace, dict):
        return []
    listed = trace.get("tool_executions")
    if not isinstance(listed, list) and isinstance(trace.get("messages"), list):
        listed = _from_messages(trace["messages"])
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
