"""Run the example job with synth-ai's EvalJob SDK (synth-ai 0.7.x; 0.4.4's
`synth_ai.sdk.api.eval.EvalJob` takes the same arguments). evalhub speaks its API unchanged:
`backend_url` is evalhub's URL and `api_key` an evalhub API key.

    EVALHUB_API_KEY=ehk_... .venv/bin/python examples/synth_eval_job.py
"""

import os

from synth_ai.sdk.eval import EvalJob, EvalJobConfig

config = EvalJobConfig(
    backend_url=os.environ.get("EVALHUB_URL", "http://127.0.0.1:8000"),
    api_key=os.environ["EVALHUB_API_KEY"],
    task_app_url="http://127.0.0.1:8001",
    task_app_api_key="my-environment-key",
    app_id="weather",
    env_name="weather",
    seeds=list(range(12)),
    policy_config={"model": "gpt-4o-mini", "provider": "openai"},
    env_config={"demo_faults": True},
    verifier_config={"enabled": False, "reward_source": "task_app"},
    concurrency=4,
    timeout=120.0,
)
job = EvalJob(config)
job_id = job.submit()
print("submitted", job_id)
result = job.poll_until_complete(timeout=600, interval=1.0)
print(result.status.value, "mean reward:", result.mean_reward, "cost:", result.total_cost_usd)
for row in result.seed_results:
    print(row.get("seed"), row.get("status"), row.get("score"), row.get("error") or "")
