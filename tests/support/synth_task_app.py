"""A task app built with synth-ai's own task-app framework, whichever release is installed:
`create_task_app(TaskAppConfig(...))` of `synth_ai.sdk.task` (0.4.x, 0.5.x) or
`synth_ai.sdk.localapi` (0.6 and later), its own `RolloutRequest` model validating what evalhub
sends and its own `RolloutResponse` shaping the answer. Run by the tests in a process of its
own, with the python of a virtualenv holding that release (`make synth-venvs`):

    python -m tests.support.synth_task_app PORT REQUESTS_JSONL

`ENVIRONMENT_API_KEY` is the key it requires. Per seed it makes one chat completion through
`policy.config.inference_url` (the usage the fake provider reports is `usage_for(seed)`), then
answers `outcome_reward = reward_of(seed)`: in `metrics` before 0.5.0, in `reward_info` (with
`outcome_objectives`, `event_rewards`, a v3 trace with `event_history`, an artifact and a
`success_status`) from 0.5.0 on. Each request it accepted is appended to REQUESTS_JSONL.

Nothing here imports evalhub or Django: only synth-ai, its dependencies and the standard library
(synth-ai when the app is built: the tests import `reward_of` and `usage_for` from here).
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from typing import Any

import httpx

MODEL = "gpt-4o-mini"


def reward_of(seed: int) -> float:
    return (seed * 37 % 100) / 100


def usage_for(seed: int) -> dict[str, int]:
    return {"prompt_tokens": 100 + 10 * seed, "completion_tokens": 20 + seed}


async def _llm_call(inference_url: str, seed: int) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{inference_url.rstrip('/')}/chat/completions",
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": f"seed {seed}: solve it"}],
                "fake": usage_for(seed),
            },
            headers={"Authorization": "Bearer sk-anything"},
        )
        response.raise_for_status()
        return response.json()


def synth_version() -> tuple[int, ...]:
    return tuple(int(p) for p in metadata.version("synth-ai").split(".")[:3])


def _framework() -> tuple[Any, Any, Any]:
    """(contracts module, TaskAppConfig, create_task_app) of the installed release."""
    if synth_version() >= (0, 6, 0):
        from synth_ai.sdk.localapi._impl import contracts
        from synth_ai.sdk.localapi._impl.server import TaskAppConfig, create_task_app
    else:
        from synth_ai.sdk.task import contracts
        from synth_ai.sdk.task.server import TaskAppConfig, create_task_app
    return contracts, TaskAppConfig, create_task_app


def _answer_0_4(request: Any, seed: int, completion: dict[str, Any]) -> Any:
    contracts = _framework()[0]
    reward = reward_of(seed)
    return contracts.RolloutResponse(
        run_id=request.run_id,
        metrics=contracts.RolloutMetrics(
            outcome_reward=reward,
            episode_rewards=[reward],
            reward_mean=reward,
            num_steps=1,
            details={"verifier_score": 1 - reward},
        ),
        trace={"messages": [completion["choices"][0]["message"]]},
    )


def _answer_0_5(request: Any, seed: int, completion: dict[str, Any]) -> Any:
    from synth_ai.data.artifacts import Artifact
    from synth_ai.data.enums import SuccessStatus

    contracts = _framework()[0]
    reward = reward_of(seed)
    message = completion["choices"][0]["message"]
    return contracts.RolloutResponse(
        trace_correlation_id=request.trace_correlation_id,
        reward_info=contracts.RolloutMetrics(
            outcome_reward=reward,
            outcome_objectives={"reward": reward, "brevity": 1.0 / (1 + seed)},
            event_rewards=[reward],
            details={"verifier_score": 1 - reward},
        ),
        trace={
            "schema_version": "3.0",
            "session_id": request.trace_correlation_id,
            "event_history": [{"type": "lm_call", "response": message}],
        },
        inference_url=request.policy.config.get("inference_url"),
        artifact=[Artifact(content=message.get("content") or "", content_type="text")],
        success_status=SuccessStatus.SUCCESS,
        status_detail=f"seed {seed} done",
    )


def build_config(requests_path: str) -> Any:
    newer = synth_version() >= (0, 5, 0)
    task_app_config = _framework()[1]

    async def rollout(request: Any, http_request: Any) -> Any:
        with open(requests_path, "a") as log:
            log.write(json.dumps(await http_request.json()) + "\n")
        seed = int(request.env.seed)
        completion = await _llm_call(request.policy.config["inference_url"], seed)
        answer = _answer_0_5 if newer else _answer_0_4
        return answer(request, seed, completion)

    return task_app_config(
        app_id="evalhub-compat",
        name="evalhub compatibility task app",
        description="One LLM call per seed through the inference URL; a reward per seed.",
        provide_taskset_description=lambda: {"splits": ["test"]},
        provide_task_instances=lambda seeds: [],
        rollout=rollout,
    )


def main() -> None:
    import uvicorn

    port, requests_path = int(sys.argv[1]), sys.argv[2]
    app = _framework()[2](build_config(requests_path))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
