"""OpenEnv servers (MCPEnvironment behind OpenEnv's HTTP server, `create_app`).

python openenv_server.py PORT steps     step-wise tools: `add` moves a counter toward
                                        3 + seed % 2, reward amount / 10 per call, done on
                                        reaching it; `fail` raises
python openenv_server.py PORT rollout   one tool, `run_rollout`, that asks the model at the
                                        `base_url` it is given and scores the answer with
                                        the task's `verify` list
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import uvicorn
from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State


class CounterEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("counter")
        self.count, self.target, self.last_reward = 0, 3, 0.0
        self._state = State(episode_id=None, step_count=0)

        @mcp.tool
        def add(amount: int) -> dict:
            """Add `amount` to the counter."""
            self.count += amount
            self.last_reward = amount / 10
            return {"count": self.count, "target": self.target}

        @mcp.tool
        def fail() -> dict:
            """Always raises."""
            raise ValueError("the counter jammed")

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Observation:
        self.count, self.target, self.last_reward = 0, 3 + (seed or 0) % 2, 0.0
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation(done=False, reward=0.0, metadata={"count": 0, "target": self.target})

    async def step_async(self, action, timeout_s=None, **kwargs) -> Observation:
        self.last_reward = 0.0
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction):
            observation.reward = self.last_reward
            observation.done = self.count >= self.target
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": "tools only"})

    @property
    def state(self) -> State:
        return self._state


class RolloutEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("rollout")
        self._state = State(episode_id=None, step_count=0)

        @mcp.tool
        async def run_rollout(
            base_url: str, api_key: str, model: str, instruction: str,
            setup: list[str] | None = None, verify: list[str] | None = None,
            task_id: str = "", sleep_s: float = 0.0,
        ) -> str:  # fmt: skip
            """Run one agent turn against `base_url`; reward = verify entries found / total."""
            await asyncio.sleep(sleep_s)
            turns, answer = [], ""
            async with httpx.AsyncClient(timeout=60) as client:
                for prompt in [*(setup or []), instruction]:
                    resp = await client.post(
                        f"{base_url}/chat/completions",
                        headers={"Authorization": f"Bearer {api_key}"},
                        json={"model": model, "messages": [{"role": "user", "content": prompt}],
                              "logprobs": True, "top_logprobs": 1},
                    )  # fmt: skip
                    if resp.status_code != 200:
                        return json.dumps({"task_id": task_id, "reward": 0.0,
                                           "error": f"LLM HTTP {resp.status_code}"})  # fmt: skip
                    choice = resp.json()["choices"][0]
                    answer = choice["message"]["content"] or ""
                    logprobs = (choice.get("logprobs") or {}).get("content") or []
                    turns.append({"completion": answer,
                                  "logprobs": [t["logprob"] for t in logprobs]})  # fmt: skip
            checks = [{"cmd": v, "passed": v in answer} for v in verify or []]
            passed = sum(c["passed"] for c in checks)
            return json.dumps({
                "task_id": task_id, "reward": passed / len(checks) if checks else 0.0,
                "verify_results": checks, "proxy_turns": turns,
                "files": {"answer.txt": answer}, "error": None,
            })  # fmt: skip

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Observation:
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation(done=False, reward=0.0)

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": "tools only"})

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    env = CounterEnvironment if sys.argv[2] == "steps" else RolloutEnvironment
    # A third argument: how many sessions the server takes at once (OpenEnv's default is 1).
    sessions = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    app = create_app(env, CallToolAction, CallToolObservation, env_name=sys.argv[2],
                     max_concurrent_envs=sessions)  # fmt: skip
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
