"""Run synth-ai's own clients against evalhub, unchanged, in a process of their own (synth-ai
creates a Celery app and files of its own on import; they stay out of the tests), with the
python of the virtualenv that holds the release: 0.4.4's `sdk` and `cli` (evalhub's .venv),
0.5.0's eval CLI runner `cli-0.5` and 0.7.3's EvalJob SDK `sdk-0.7` (.venv-synth/<version>).

    python -m tests.support.synth_client MODE BACKEND_URL API_KEY TASK_APP_URL SEEDS_JSON ENV_CONFIG_JSON

The newer modes take the task app's key from ENVIRONMENT_API_KEY, as synth-ai does. Prints one
JSON line: what the client returned.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict


def run_sdk(backend: str, api_key: str, task_app: str, seeds: list[int], env_config: dict) -> dict:
    from synth_ai.sdk.api.eval import EvalJob, EvalJobConfig

    job = EvalJob(
        EvalJobConfig(
            task_app_url=task_app,
            backend_url=backend,
            api_key=api_key,
            task_app_api_key="task-key-123",
            app_id="demo",
            env_name="demo",
            seeds=seeds,
            policy_config={"model": "gpt-4o-mini", "provider": "openai"},
            env_config=env_config,
            concurrency=2,
            timeout=30.0,
        )
    )
    job_id = job.submit()
    result = job.poll_until_complete(timeout=120, interval=0.5)
    return {
        "job_id": job_id,
        "status": result.status.value,
        "succeeded": result.succeeded,
        "mean_score": result.mean_score,
        "error": result.error,
        "seed_results": result.seed_results,
    }


def run_sdk_read(
    backend: str, api_key: str, job_id: str, seeds: list[int], env_config: dict
) -> dict:
    """0.4.4's SDK following a job made elsewhere (`sdk-read`: TASK_APP_URL is the job's id), as
    one made with `repeats` (which 0.4.4 cannot ask for): poll it to the end, read the results."""
    from synth_ai.sdk.api.eval import EvalJob

    job = EvalJob.from_job_id(job_id, backend_url=backend, api_key=api_key)
    result = job.poll_until_complete(timeout=120, interval=0.5)
    return {
        "status": result.status.value,
        "succeeded": result.succeeded,
        "mean_score": result.mean_score,
        "num_completed": result.num_completed,
        "num_total": result.num_total,
        "seed_results": result.seed_results,
        "results": job.get_results(),
    }


def run_cli(backend: str, api_key: str, task_app: str, seeds: list[int], env_config: dict) -> dict:
    from synth_ai.cli.commands.eval.config import EvalRunConfig
    from synth_ai.cli.commands.eval.runner import run_eval_via_backend

    config = EvalRunConfig(
        app_id="demo",
        task_app_url=task_app,
        task_app_api_key="task-key-123",
        env_name="demo",
        env_config=env_config,
        policy_name="demo-policy",
        policy_config={"model": "gpt-4o-mini", "provider": "openai"},
        seeds=seeds,
        concurrency=2,
    )
    try:
        results = asyncio.run(run_eval_via_backend(config, backend, api_key))
    except RuntimeError as exc:
        return {"raised": str(exc)}
    return {"results": [asdict(r) for r in results]}


def run_cli_0_5(
    backend: str, api_key: str, task_app: str, seeds: list[int], env_config: dict
) -> dict:
    from synth_ai.core.eval.config import EvalRunConfig
    from synth_ai.core.eval.runner import run_eval_via_backend

    config = EvalRunConfig(
        app_id="demo",
        task_app_url=task_app,
        env_name="demo",
        env_config=env_config,
        policy_name="demo-policy",
        policy_config={"model": "gpt-4o-mini", "provider": "openai"},
        seeds=seeds,
        ops=["agent", "env"],
        concurrency=2,
        poll_interval=0.5,
        timeout=60,
    )
    results = asyncio.run(run_eval_via_backend(config, backend, api_key))
    return {"results": [asdict(r) for r in results]}


def run_sdk_0_7(
    backend: str, api_key: str, task_app: str, seeds: list[int], env_config: dict
) -> dict:
    """Every way 0.7.3's EvalJob follows a job, one job each, then a cancel."""
    import tempfile
    from pathlib import Path

    from synth_ai.sdk.eval import EvalJob, EvalJobConfig

    def job(job_seeds: list[int], concurrency: int = 2) -> EvalJob:
        # No task_app_api_key: the SDK takes ENVIRONMENT_API_KEY and tries to upload it first.
        return EvalJob(
            EvalJobConfig(
                task_app_url=task_app, backend_url=backend, api_key=api_key, app_id="demo",
                env_name="demo", seeds=job_seeds, env_config=env_config,
                policy_config={"model": "gpt-4o-mini", "provider": "openai"},
                verifier_config={"enabled": False, "reward_source": "task_app"},
                concurrency=concurrency, timeout=60.0,
            )
        )  # fmt: skip

    def result(r) -> dict:
        return {"status": r.status.value, "raw_status": r.raw.get("status"),
                "mean_reward": r.mean_reward, "total_tokens": r.total_tokens,
                "total_cost_usd": r.total_cost_usd, "num_completed": r.num_completed,
                "num_total": r.num_total, "seed_results": r.seed_results}  # fmt: skip

    out: dict = {}
    streamed = job(seeds)
    out["streamed_job_id"] = streamed.submit()
    out["stream"] = result(streamed.stream_until_complete(timeout=120, interval=0.5))
    out["results"] = streamed.get_results()
    out["workflow_state"] = streamed.query_workflow_state()
    traces = streamed.download_traces(Path(tempfile.mkdtemp()))
    out["trace_files"] = sorted(p.name for p in Path(traces).rglob("*.json"))

    sse = job(seeds)
    sse.submit()
    events: list = []
    out["sse"] = result(
        sse.stream_sse_until_complete(timeout=120, on_event=events.append, progress=False)
    )
    out["sse_events"] = events

    polled = job(seeds)
    polled.submit()
    out["poll"] = result(polled.poll_until_complete(timeout=120, interval=0.5))

    cancelled = job(list(range(1000, 1060)), concurrency=1)
    cancelled.submit()
    out["cancel"] = cancelled.cancel(reason="no longer needed")
    out["cancelled_status"] = cancelled.get_status()["status"]
    return out


MODES = {
    "sdk": run_sdk,
    "sdk-read": run_sdk_read,
    "cli": run_cli,
    "cli-0.5": run_cli_0_5,
    "sdk-0.7": run_sdk_0_7,
}


def main() -> None:
    mode, backend, api_key, task_app, seeds, env_config = sys.argv[1:7]
    run = MODES[mode]
    out = run(backend, api_key, task_app, json.loads(seeds), json.loads(env_config))
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
