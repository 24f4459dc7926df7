"""Run synth-ai 0.4.4's own clients against evalhub, unchanged, in a process of their own
(synth-ai creates a Celery app and files of its own on import; they stay out of the tests).

    python -m tests.support.synth_client sdk|cli BACKEND_URL API_KEY TASK_APP_URL SEEDS_JSON ENV_CONFIG_JSON

Prints one JSON line: what the client returned.
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


def main() -> None:
    mode, backend, api_key, task_app, seeds, env_config = sys.argv[1:7]
    run = run_sdk if mode == "sdk" else run_cli
    out = run(backend, api_key, task_app, json.loads(seeds), json.loads(env_config))
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
