"""An eval-protocol MCP-Gym server (McpGym + EnvironmentAdapter): a walk to a goal.

The goal is 2 + seed % 3 steps away, so a server that never saw the seed walks 2 steps. Each
`move` advances one step: reward 0.1, or 0.5 on reaching the goal, which terminates. `wait`
never gets anywhere (reward 0), `crash` raises, `shout` answers plain text, not JSON.

    python gym_server.py PORT
"""

from __future__ import annotations

import os
import sys
from typing import Any

from eval_protocol.mcp import EnvironmentAdapter, McpGym
from mcp.server.fastmcp import Context


class Walk:
    def __init__(self, seed: int | None):
        self.goal = 2 + (seed or 0) % 3
        self.position = 0


class WalkAdapter(EnvironmentAdapter):
    def create_environment(self, config: dict[str, Any] | None = None) -> Walk:
        return Walk(None)

    def create_environment_with_seed(self, config, seed=None):
        env = Walk(seed)
        return env, env.position, {"goal": env.goal}

    def reset_environment(self, env: Walk, seed: int | None = None):
        env.position = 0
        return env.position, {"goal": env.goal}

    def step_environment(self, env: Walk, action: str):
        if action == "forward":
            env.position += 1
        done = env.position >= env.goal
        reward = 0.0 if action != "forward" else (0.5 if done else 0.1)
        return env.position, reward, done, False, {"goal": env.goal}

    def parse_action(self, action_str: str) -> str:
        return action_str

    def format_observation(self, observation: Any) -> Any:
        return observation

    def get_default_config(self) -> dict[str, Any]:
        return {}

    def close_environment(self, env: Walk) -> None:
        pass


class WalkGym(McpGym):
    def __init__(self):
        super().__init__("Walk-v0", WalkAdapter())

    def _register_tools(self):
        @self.mcp.tool(name="move", description="Take one step forward toward the goal.")
        def move(direction: str, ctx: Context) -> dict[str, Any]:
            return self._step(ctx, "forward" if direction == "forward" else "stay")

        @self.mcp.tool(name="wait", description="Stay where you are.")
        def wait(ctx: Context) -> dict[str, Any]:
            return self._step(ctx, "stay")

        @self.mcp.tool(name="crash", description="Always fails.")
        def crash() -> dict[str, Any]:
            raise RuntimeError("the ice cracked under you")

        @self.mcp.tool(name="shout", description="Answers in plain text.")
        def shout(text: str = "") -> str:
            return f"ECHO {text} (this is not JSON)"

    def _step(self, ctx: Context, action: str) -> dict[str, Any]:
        session_id = self._get_session_id(ctx)
        self._get_or_create_session(ctx)
        return self._execute_session_environment_step(session_id, action)

    def format_observation(self, obs: Any, env: Any) -> dict[str, Any]:
        return {"position": int(obs), "goal_distance": env.goal - int(obs)}


if __name__ == "__main__":
    os.environ["PORT"] = sys.argv[1]
    server = WalkGym()
    server.mcp.settings.host = "127.0.0.1"
    server.run(transport="streamable-http")
