"""OpenTelemetry export against a real Arize Phoenix (its own virtualenv, `.venv-env/phoenix`,
on a loopback port): one trace per sample, LLM spans whose token counts are the job's results,
a task app's own span in the sample's trace with the LLM call under it; and with no collector
at all, the job finishes and the drop counter says what was lost."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from jobs.models import EvalJob, RolloutAttempt, SeedRun
from tests.environments.conftest import venv_python
from tests.support import servers
from tests.support.jobs import api_job_run, job_body
from tests.support.task_app import task_app_create
from tests.support.traced_task_app import traced_task_app_create
from traces.models import LLMCall
from traces.otel.context import sample_trace_id

pytestmark = pytest.mark.worker
# The job of the export-off / no-collector comparison.
SAMPLES = 40


@pytest.fixture(scope="module")
def phoenix(django_db_setup, tmp_path_factory):
    """Phoenix serving its UI, REST API and OTLP/HTTP receiver; yields its base URL."""
    python = venv_python("phoenix")
    port, grpc = servers.free_port(), servers.free_port()
    env = servers.child_env(
        PHOENIX_PORT=str(port), PHOENIX_HOST="127.0.0.1", PHOENIX_GRPC_PORT=str(grpc),
        PHOENIX_WORKING_DIR=str(tmp_path_factory.mktemp("phoenix")),
        PHOENIX_TELEMETRY_ENABLED="false",
    )  # fmt: skip
    proc = servers.ChildProcess("phoenix", [python, "-m", "phoenix.server.main", "serve"], env)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"phoenix exited at start:\n{proc.log()}")
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    servers.wait_until(up, timeout=240, interval=0.5, what="Phoenix to start")
    yield base
    proc.stop()


def phoenix_spans(base: str, trace_ids: list[str]) -> list[dict]:
    params = [("limit", "1000"), *(("trace_id", t) for t in trace_ids)]
    answer = httpx.get(f"{base}/v1/projects/default/spans", params=params, timeout=10)
    answer.raise_for_status()
    return answer.json()["data"]


def test_phoenix_holds_one_trace_per_sample(evalhub_factory, phoenix):
    base, headers, _ = evalhub_factory(OTEL_EXPORTER_OTLP_ENDPOINT=phoenix,
                                       OTEL_SERVICE_NAME="evalhub-test")  # fmt: skip
    app, state, provider = traced_task_app_create(f"{phoenix}/v1/traces")
    with servers.serve_asgi(app) as task_url:
        run = api_job_run(base, headers, job_body(task_url, seeds=[0, 1, 2]))
    provider.shutdown()
    assert run["status"]["status"] == "completed", run["status"]
    job_id = run["job_id"]
    rows = {r["seed"]: r for r in run["results"]["results"]}
    traces = {seed: f"{sample_trace_id(job_id, seed, 0):032x}" for seed in rows}
    # The traceparent each rollout was sent names its sample's trace.
    assert sorted(tp.split("-")[1] for tp in state.traceparents) == sorted(traces.values())

    def complete() -> list[dict] | None:
        spans = phoenix_spans(phoenix, list(traces.values()))
        roots = [s for s in spans if s["parent_id"] is None]
        llm = [s for s in spans if s["span_kind"] == "LLM"]
        return spans if len(roots) == 3 and len(llm) == 3 else None

    spans = servers.wait_until(complete, timeout=60, interval=0.5, what="the traces in Phoenix")
    by_trace: dict[str, list[dict]] = {}
    for span in spans:
        by_trace.setdefault(span["context"]["trace_id"], []).append(span)
    assert set(by_trace) == set(traces.values())  # one trace per sample, no other
    app_spans = {seed: (f"{t:032x}", f"{s:016x}") for seed, t, s in state.spans}
    for seed, trace_id in traces.items():
        spans = {s["name"]: s for s in by_trace[trace_id]}
        root = spans[f"sample seed={seed} repeat=0"]
        assert root["attributes"]["evalhub.job.id"] == job_id
        assert root["attributes"]["evalhub.score"] == pytest.approx(rows[seed]["score"])
        assert root["attributes"]["evalhub.status"] == "succeeded"
        attempt = spans["attempt 1"]
        assert attempt["parent_id"] == root["context"]["span_id"]
        # The task app's own span joined the sample's trace, under the attempt...
        app_trace, app_span = app_spans[seed]
        assert app_trace == trace_id
        assert spans["task_app.rollout"]["context"]["span_id"] == app_span
        assert spans["task_app.rollout"]["parent_id"] == attempt["context"]["span_id"]
        # ...and the LLM call it made sits under it, with the tokens of the job's results.
        (llm,) = [s for s in by_trace[trace_id] if s["span_kind"] == "LLM"]
        assert llm["parent_id"] == app_span
        attributes = llm["attributes"]
        assert attributes["llm.token_count.total"] == rows[seed]["tokens"]
        assert (attributes["gen_ai.usage.input_tokens"] + attributes["gen_ai.usage.output_tokens"]
                == rows[seed]["tokens"])  # fmt: skip
        assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["llm.cost.total"] == pytest.approx(rows[seed]["cost_usd"])
        assert attributes["llm.input_messages.0.message.content"] == (
            f"seed {seed}, my key is <redacted>"
        )
    assert "task-key-123" not in json.dumps(phoenix_spans(phoenix, list(traces.values())))
    # The worker's heartbeat (every 2 s) brings its counts to /healthz.
    otel = servers.wait_until(lambda: _exported(base, 9), timeout=30, what="the counts")
    assert otel["dropped"] == 0


def _exported(base: str, at_least: int) -> dict | None:
    health = httpx.get(f"{base}/healthz", timeout=10).json()
    otel = [w["otel"] for w in health["workers"] if "otel" in w]
    return otel[0] if otel and otel[0]["exported"] >= at_least else None


def test_tool_executions_and_the_judge_have_spans(evalhub_factory, phoenix, gym_server):
    """An MCP-Gym job, which evalhub drives itself, judged by the verifier."""
    base, headers, _ = evalhub_factory(OTEL_EXPORTER_OTLP_ENDPOINT=phoenix)
    fake = {"tool_name": "move", "tool_arguments": {"direction": "forward"},
            "prompt_tokens": 100, "completion_tokens": 20}  # fmt: skip
    run = api_job_run(base, headers, {
        "task_app_url": gym_server, "task_app_kind": "mcp_gym", "seeds": [1],
        "policy": {"model": "gpt-4o-mini", "provider": "openai", "extra_body": {"fake": fake}},
        "env_config": {"max_steps": 10}, "max_concurrent": 1, "timeout": 60,
        "verifier_config": {"enabled": True, "backend_model": "gpt-4o-mini",
                            "backend_provider": "openai"},
    })  # fmt: skip
    assert run["status"]["status"] == "completed", run["status"]
    (row,) = run["results"]["results"]
    trace_id = f"{sample_trace_id(run['job_id'], 1, 0):032x}"
    executions = SeedRun.objects.get(job_id=run["job_id"]).task_trace["tool_executions"]

    def complete() -> list[dict] | None:
        spans = phoenix_spans(phoenix, [trace_id])
        return spans if any(s["name"] == "judge" for s in spans) else None

    spans = servers.wait_until(complete, timeout=60, interval=0.5, what="the trace in Phoenix")
    named = {s["name"]: s for s in spans}
    tools = [s for s in spans if s["span_kind"] == "TOOL"]
    assert len(tools) == len(executions) > 0
    assert {s["parent_id"] for s in tools} == {named["attempt 1"]["context"]["span_id"]}
    assert tools[0]["attributes"]["gen_ai.tool.name"] == "move"
    judge = named["judge"]
    assert judge["parent_id"] == named["sample seed=1 repeat=0"]["context"]["span_id"]
    assert judge["attributes"]["evalhub.judge.score"] == pytest.approx(row["verifier_score"])
    judge_llm = [s for s in spans if s["parent_id"] == judge["context"]["span_id"]]
    assert [s["attributes"]["evalhub.call.kind"] for s in judge_llm] == ["judge"]
    policy_llm = [s for s in spans if s["span_kind"] == "LLM" and s not in judge_llm]
    assert sum(s["attributes"]["llm.token_count.total"] for s in policy_llm) == row["tokens"]


def _spans_of(job_id: str) -> int:
    """How many spans a job's samples make here: each sample, attempt and LLM call."""
    runs = SeedRun.objects.filter(job_id=job_id)
    attempts = RolloutAttempt.objects.filter(seed_run__job_id=job_id)
    return runs.count() + attempts.count() + LLMCall.objects.filter(attempt__in=attempts).count()


@pytest.mark.parametrize("export", ["off", "no collector"])
def test_no_collector_costs_the_job_nothing_and_drops_are_counted(evalhub_factory, capsys, export):
    """The same job with export off and towards a port nobody listens on: both times printed
    (measured, not asserted); the drops counted on /healthz and logged by the worker."""
    nowhere = f"http://127.0.0.1:{servers.free_port()}" if export != "off" else ""
    base, headers, worker = evalhub_factory(OTEL_EXPORTER_OTLP_ENDPOINT=nowhere,
                                            OTEL_EXPORTER_OTLP_TIMEOUT="1000")  # fmt: skip
    app, _ = task_app_create()
    body = job_body("", seeds=list(range(SAMPLES)), max_concurrent=5,
                    env_config={"call_llm": True, "delay_s": 0.05})  # fmt: skip
    with servers.serve_asgi(app) as task_url:
        run = api_job_run(base, headers, {**body, "task_app_url": task_url})
    assert run["status"]["status"] == "completed", run["status"]
    job = EvalJob.objects.get(pk=run["job_id"])
    took = (job.completed_at - job.started_at).total_seconds()  # as the job's rows say
    expected = _spans_of(run["job_id"])
    with capsys.disabled():
        print(f"\n{SAMPLES} samples, export {export}: the job ran {took:.2f}s ({expected} spans)")
    if export == "off":
        time.sleep(3)  # the zip task has run: nothing was queued, nothing reported
        health = httpx.get(f"{base}/healthz", timeout=10).json()
        assert not [w for w in health["workers"] if "otel" in w]
        return

    def dropped() -> dict | None:
        health = httpx.get(f"{base}/healthz", timeout=10).json()
        otel = [w["otel"] for w in health["workers"] if "otel" in w]
        return otel[0] if otel and otel[0]["dropped"] == expected else None

    otel = servers.wait_until(dropped, timeout=60, interval=0.5, what="the drops counted")
    assert otel == {"exported": 0, "dropped": expected, "queued": 0}
    servers.wait_until(lambda: "span(s) dropped so far" in worker.log(), timeout=30,
                       what="the drops logged")  # fmt: skip
