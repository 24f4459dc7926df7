"""A task app instrumented with OpenTelemetry, as a task app author would do it: each rollout
is a span of its own, a child of the `traceparent` evalhub sent, exported to `endpoint`; its
LLM call carries that span as its own `traceparent` to the interceptor."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


@dataclass
class TracedState:
    traceparents: list[str] = field(default_factory=list)
    # (seed, trace id, span id) of each rollout span the app emitted.
    spans: list[tuple[int, int, int]] = field(default_factory=list)


def traced_task_app_create(endpoint: str) -> tuple[FastAPI, TracedState, TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "traced-task-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracer = provider.get_tracer("traced-task-app")
    propagator = TraceContextTextMapPropagator()
    app, state = FastAPI(), TracedState()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request) -> dict[str, Any]:
        body = await request.json()
        seed = int(body["env"]["seed"])
        state.traceparents.append(request.headers.get("traceparent", ""))
        parent = propagator.extract(dict(request.headers))
        with tracer.start_as_current_span("task_app.rollout", context=parent) as span:
            carrier: dict[str, str] = {}
            propagator.inject(carrier)
            config = body["policy"]["config"]
            # A careless task app puts its own key in the prompt: it must not leave evalhub.
            careless = f"my key is {request.headers.get('x-api-key')}"
            async with httpx.AsyncClient(timeout=60) as client:
                answer = await client.post(
                    f"{config['inference_url']}/chat/completions",
                    headers=carrier,
                    json={"model": config.get("model", "gpt-4o-mini"),
                          "messages": [{"role": "user", "content": f"seed {seed}, {careless}"}]},
                )  # fmt: skip
            answer.raise_for_status()
            context = span.get_span_context()
            state.spans.append((seed, context.trace_id, context.span_id))
        return {"run_id": body["run_id"], "metrics": {"outcome_reward": seed / 10},
                "trace": None, "aborted": False}  # fmt: skip

    return app, state, provider
