"""One sample's spans, built from its trace document once the sample is finished.

The document (`traces.zip.documents.trace_of`, redacted by the job's redactor) already holds the
sample, its attempts, its LLM calls read as chat (`traces.calls.conversation`) with their usage,
cost and times, the judge's verdict and the tool executions of the environments evalhub drives;
each becomes a span with explicit start and end times and ids derived from the sample
(`traces.otel.context`), so nothing is recorded for it while the rollout runs:

    sample (root) ── attempt n ── [the task app's own spans] ── LLM call (policy)
                  │             └─ tool execution (mcp_gym, openenv)
                  └─ judge ── LLM call (judge)

A call that came with a `traceparent` of the sample's trace is the child of the span it names
(the task app's own span); any other call is the child of its attempt. Attributes follow the
OpenTelemetry GenAI semantic conventions (`gen_ai.*`) and OpenInference's (`openinference.*`,
`llm.*`, `input.value`, `output.value`), so Phoenix, Langfuse and other backends show them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from traces.otel.context import sample_trace_id, span_id, traceparent_parse

SCOPE = InstrumentationScope("evalhub")
_OPERATIONS = {"completions": "text_completion", "embeddings": "embeddings"}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

Attributes = dict[str, Any]


def _ns(value: str | None) -> int | None:
    return int(datetime.fromisoformat(value).timestamp() * 1e9) if value else None


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def _clean(attributes: Attributes) -> Attributes:
    """OTel attributes take no None: absent values are left out, lists kept as strings."""
    out: Attributes = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, list):
            value = [str(v) for v in value if v is not None]
        elif not isinstance(value, (str, bool, int, float)):
            value = _json(value)
        out[key] = value
    return out


class SampleSpans:
    """Builds the spans of one sample's trace document."""

    def __init__(self, document: dict[str, Any], resource: Resource):
        self.doc = document
        self.resource = resource
        self.trace_id = sample_trace_id(str(document["job_id"]), document["seed"],
                                        document["repeat"])  # fmt: skip
        self.spans: list[ReadableSpan] = []

    def _context(self, *parts: object) -> SpanContext:
        return SpanContext(self.trace_id, span_id(self.trace_id, *parts), is_remote=False,
                           trace_flags=_SAMPLED)  # fmt: skip

    def _add(self, name: str, context: SpanContext, parent: SpanContext | None, start: int,
             end: int, attributes: Attributes, error: str | None = None) -> None:  # fmt: skip
        status = Status(StatusCode.ERROR, error[:500]) if error else Status(StatusCode.OK)
        self.spans.append(ReadableSpan(
            name, context=context, parent=parent, resource=self.resource,
            attributes=_clean(attributes), kind=SpanKind.INTERNAL, status=status,
            start_time=start, end_time=max(start, end), instrumentation_scope=SCOPE,
        ))  # fmt: skip

    def build(self, call_parents: list[str]) -> list[ReadableSpan]:
        """Every span of the sample; `call_parents` holds each LLM call's recorded traceparent,
        in the document's order."""
        doc = self.doc
        calls = doc["llm_calls"]
        times = [t for c in calls for t in _call_times(c)]
        times += [t for a in doc["attempts"] for t in (_ns(a["started_at"]), _ns(a["finished_at"]))]
        times = [t for t in times if t is not None]
        start = _ns(doc["started_at"]) or min(times, default=0)
        end = max([_ns(doc["finished_at"]) or start, *times])
        root = self._context("sample")
        self._add(f"sample seed={doc['seed']} repeat={doc['repeat']}", root, None, start, end,
                  self._sample_attributes(), doc["error"])  # fmt: skip
        for attempt in doc["attempts"]:
            a_start = _ns(attempt["started_at"]) or start
            self._add(f"attempt {attempt['number']}", self._context("attempt", attempt["number"]),
                      root, a_start, _ns(attempt["finished_at"]) or end,
                      _attempt_attributes(attempt), attempt["error"])  # fmt: skip
        judge = self._judge(root, [c for c in calls if c["kind"] == "judge"], end)
        for call, traceparent in zip(calls, call_parents, strict=True):
            self._call(call, traceparent, judge)
        self._tools(doc["attempts"][-1]["number"] if doc["attempts"] else None, start)
        return self.spans

    def _sample_attributes(self) -> Attributes:
        doc, usage = self.doc, self.doc["usage"]
        return {
            "openinference.span.kind": "CHAIN",
            "evalhub.job.id": str(doc["job_id"]),
            "evalhub.seed": doc["seed"],
            "evalhub.repeat": doc["repeat"],
            "evalhub.kind": doc["task_app"]["kind"],
            "evalhub.status": doc["status"],
            "evalhub.score": doc.get("score"),
            "evalhub.task_app_score": doc.get("task_app_score"),
            "evalhub.error": doc["error"],
            "evalhub.reused": doc["reused"],
            "gen_ai.usage.input_tokens": usage["prompt_tokens"],
            "gen_ai.usage.output_tokens": usage["completion_tokens"],
            "llm.token_count.total": usage["total_tokens"],
            "evalhub.cost_usd": usage["cost_usd"],
            "evalhub.num_llm_calls": usage["num_llm_calls"],
        }

    def _judge(self, root: SpanContext, calls: list[dict], end: int) -> SpanContext | None:
        verdict = self.doc.get("verifier")
        if not calls and not verdict:
            return None
        context = self._context("judge")
        times = [t for c in calls for t in _call_times(c)] or [end]
        verdict = verdict or {}
        self._add("judge", context, root, min(times), max(times), {
            "openinference.span.kind": "EVALUATOR",
            "evalhub.judge.status": verdict.get("status"),
            "evalhub.judge.score": verdict.get("verifier_score"),
            "evalhub.judge.justification": verdict.get("justification"),
            "evalhub.judge.cost_usd": verdict.get("judge_cost_usd"),
        }, verdict.get("error"))  # fmt: skip
        return context

    def _call(self, call: dict[str, Any], traceparent: str, judge: SpanContext | None) -> None:
        parent = self._context("attempt", call["attempt"])
        if call["kind"] == "judge" and judge is not None:
            parent = judge
        elif (sent := traceparent_parse(traceparent)) and sent[0] == self.trace_id:
            parent = SpanContext(self.trace_id, sent[1], is_remote=True, trace_flags=_SAMPLED)
        start, end = _call_times(call)
        operation = _OPERATIONS.get(call["route"], "chat")
        model = call["model_requested"] or call["model_answered"]
        name = f"{operation} {model}".strip()
        context = self._context("call", call["attempt"], call["seq"], call["kind"])
        self._add(name, context, parent, start, end, call_attributes(call, operation),
                  call["error"])  # fmt: skip

    def _tools(self, attempt: int | None, start: int) -> None:
        trace = self.doc["task_app"].get("trace")
        executions = trace.get("tool_executions") if isinstance(trace, dict) else None
        if attempt is None or not isinstance(executions, list):
            return
        parent = self._context("attempt", attempt)
        for i, execution in enumerate(e for e in executions if isinstance(e, dict)):
            t0 = _ns(execution.get("started_at")) or start
            t1 = t0 + int(float(execution.get("duration_ms") or 0) * 1e6)
            name = str(execution.get("name") or "")
            self._add(f"execute_tool {name}", self._context("tool", attempt, i), parent, t0, t1, {
                "openinference.span.kind": "TOOL",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": execution.get("call_id"),
                "tool.name": name,
                "tool.parameters": execution.get("arguments"),
                "input.value": _json(execution.get("arguments")),
                "input.mime_type": "application/json",
                "output.value": _json(execution.get("result")),
                "output.mime_type": "application/json",
                "evalhub.tool.step": execution.get("step"),
                "evalhub.tool.reward": execution.get("reward"),
            }, execution.get("error"))  # fmt: skip


def _attempt_attributes(attempt: dict[str, Any]) -> Attributes:
    return {
        "openinference.span.kind": "AGENT",
        "evalhub.attempt.number": attempt["number"],
        "evalhub.attempt.run_id": attempt["run_id"],
        "evalhub.attempt.status": attempt["status"],
        "http.response.status_code": attempt["http_status"],
        "evalhub.attempt.error": attempt["error"],
    }


def _call_times(call: dict[str, Any]) -> tuple[int, int]:
    start = _ns(call["started_at"]) or 0
    return start, start + int(float(call["latency_ms"] or 0) * 1e6)


def call_attributes(call: dict[str, Any], operation: str) -> Attributes:
    """The GenAI and OpenInference attributes of one call of a trace document."""
    usage, request, response = call["usage"], call["request"] or {}, call["response"] or {}
    finish = response.get("finish_reason")
    attributes: Attributes = {
        "openinference.span.kind": "EMBEDDING" if operation == "embeddings" else "LLM",
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": call["provider"],
        "gen_ai.system": call["provider"],
        "gen_ai.request.model": call["model_requested"],
        "gen_ai.response.model": call["model_answered"],
        "gen_ai.response.id": response.get("id"),
        "gen_ai.response.finish_reasons": [finish] if finish else None,
        "gen_ai.usage.input_tokens": usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens"],
        "gen_ai.usage.cache_read.input_tokens": usage["cached_tokens"],
        "gen_ai.usage.cache_creation.input_tokens": usage["cache_write_tokens"],
        "gen_ai.usage.reasoning.output_tokens": usage["reasoning_tokens"],
        "llm.model_name": call["model_answered"] or call["model_requested"],
        "llm.provider": call["provider"],
        "llm.token_count.prompt": usage["prompt_tokens"],
        "llm.token_count.completion": usage["completion_tokens"],
        "llm.token_count.total": usage["total_tokens"],
        "llm.token_count.prompt_details.cache_read": usage["cached_tokens"],
        "llm.token_count.prompt_details.cache_write": usage["cache_write_tokens"],
        "llm.token_count.completion_details.reasoning": usage["reasoning_tokens"],
        "llm.cost.total": call["cost_usd"],
        "evalhub.cost_usd": call["cost_usd"],
        "evalhub.cost_unknown": call["cost_unknown"],
        "evalhub.usage_estimated": usage["estimated"],
        "evalhub.call.kind": call["kind"],
        "evalhub.call.seq": call["seq"],
        "evalhub.call.route": call["route"],
        "evalhub.attempt": call["attempt"],
        "http.response.status_code": call["http_status"],
        "llm.invocation_parameters": request.get("params") or None,
    }
    attributes.update(_messages(request, response, call["content_pruned"]))
    return attributes


def _messages(request: dict, response: dict, pruned: bool) -> Attributes:
    if pruned:
        return {"evalhub.content_pruned": True}
    sent = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    answer = response.get("message")
    answers = [answer] if isinstance(answer, dict) else []
    out: Attributes = {
        "input.value": _json(sent),
        "input.mime_type": "application/json",
        "gen_ai.input.messages": _json(sent),
    }
    if answers or response.get("body") is not None:
        out["output.value"] = _json(answers[0] if answers else response.get("body"))
        out["output.mime_type"] = "application/json"
        out["gen_ai.output.messages"] = _json(answers)
    for prefix, messages in (("llm.input_messages", sent), ("llm.output_messages", answers)):
        for i, message in enumerate(messages):
            out.update(_message(f"{prefix}.{i}.message", message))
    for i, tool in enumerate(request.get("tools") or []):
        out[f"llm.tools.{i}.tool.json_schema"] = _json(tool)
    return out


def _message(prefix: str, message: dict[str, Any]) -> Attributes:
    content = message.get("content")
    out: Attributes = {
        f"{prefix}.role": message.get("role"),
        f"{prefix}.content": content if isinstance(content, str) or content is None
        else _text(content),
        f"{prefix}.tool_call_id": message.get("tool_call_id"),
    }  # fmt: skip
    for j, tool_call in enumerate(message.get("tool_calls") or []):
        function = tool_call.get("function") or {} if isinstance(tool_call, dict) else {}
        at = f"{prefix}.tool_calls.{j}.tool_call"
        out[f"{at}.id"] = tool_call.get("id") if isinstance(tool_call, dict) else None
        out[f"{at}.function.name"] = function.get("name")
        arguments = function.get("arguments")
        out[f"{at}.function.arguments"] = (
            arguments if isinstance(arguments, str) else _json(arguments)
        )
    return out


def _text(content: Any) -> str:
    """Content parts as text: the text parts joined, anything else as JSON."""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if isinstance(p.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return _json(content)
