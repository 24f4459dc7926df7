"""OpenEnv servers (`HTTPEnvServer` around an `MCPEnvironment`), over their WebSocket session
at `/ws`: `reset {seed, episode_id}`, `step {list_tools | call_tool}`, `close`.

`env_config.mode`:
- `agent`: the agent loop over the environment's tools; reward and `done` come back in the
  step observations, the score is the sum of the rewards.
- `rollout_tool`: one call of `env_config.tool` (default `run_rollout`) that runs a whole agent
  against the OpenAI-compatible `base_url` it is given (the attempt's interceptor URL), with
  the seed's task; the score is the `reward` of the JSON it answers, its `error` the seed's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import websockets
from django.conf import settings

from jobs import kinds
from jobs.worker.environments.loop import PLACEHOLDER_KEY, StepOutcome, agent_loop, result_value
from jobs.worker.environments.outcome import environment_outcome, unreachable, wrong_kind
from jobs.worker.episode import BUSY_RETRY_S, EnvironmentBusy, RolloutOutcome, TaskAppError

# The error code of an OpenEnv server whose sessions are all taken (openenv's WSErrorCode).
CAPACITY_REACHED = "CAPACITY_REACHED"
# What stands for the interceptor URL in a trace (the URL holds the attempt's token).
INFERENCE_URL_SHOWN = "(the attempt's inference URL)"


def ws_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return "ws" + base.removeprefix("http") + "/ws"


async def probe(client: httpx.AsyncClient, *, base_url: str) -> str | None:
    """None when an OpenEnv server answers at `base_url` (its `/health` and `/metadata`)."""
    try:
        health = await client.get(f"{base_url}/health", timeout=10.0)
        metadata = await client.get(f"{base_url}/metadata", timeout=10.0)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return unreachable(base_url, exc)
    except httpx.HTTPError as exc:
        return wrong_kind(base_url, "an OpenEnv server", f"{type(exc).__name__}: {exc}")
    try:
        shaped = isinstance(metadata.json(), dict) and health.status_code == 200
    except ValueError:
        shaped = False
    if not shaped or metadata.status_code != 200:
        return wrong_kind(
            base_url, "an OpenEnv server",
            f"GET /health answered HTTP {health.status_code}, GET /metadata HTTP {metadata.status_code}",
        )  # fmt: skip
    return None


class OpenEnvSession:
    """One WebSocket session: one environment instance on the server."""

    def __init__(self, socket):
        self.socket = socket
        self.total_reward = 0.0

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            await self.socket.send(json.dumps(message))
        except websockets.ConnectionClosed:
            pass  # a server that closed may have said why first (at capacity): read it
        answer = json.loads(await self.socket.recv())
        if answer.get("type") == "error":
            data = answer.get("data") or {}
            if data.get("code") == CAPACITY_REACHED:
                limit = data.get("max_sessions")
                raise EnvironmentBusy(
                    f"OpenEnv server at capacity: {data.get('message')}",
                    retry_after_s=BUSY_RETRY_S,
                    limit=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
                )
            raise TaskAppError(
                f"OpenEnv answered an error to {message['type']}: {data.get('message')}",
                transient=False,
            )
        return answer.get("data") or {}

    async def list_tools(self) -> list[dict[str, Any]]:
        data = await self.send({"type": "step", "data": {"type": "list_tools"}})
        tools = (data.get("observation") or {}).get("tools")
        if not isinstance(tools, list):
            raise TaskAppError("OpenEnv's list_tools answered no tools", transient=False)
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> StepOutcome:
        data = await self.send(
            {
                "type": "step",
                "data": {"type": "call_tool", "tool_name": name, "arguments": arguments},
            }  # fmt: skip
        )
        observation = data.get("observation") or {}
        reward = data.get("reward")
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            self.total_reward += reward
        else:
            reward = None
        done = bool(data.get("done"))
        error = observation.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return StepOutcome(error=message or "the tool failed", reward=reward, done=done)
        return StepOutcome(result=tool_result(observation.get("result")), reward=reward, done=done)


def tool_result(result: Any) -> Any:
    """An MCP CallToolResult as OpenEnv serializes it: its text content (JSON when it is
    JSON), else the structured content or the value itself."""
    if isinstance(result, dict):
        content = result.get("content")
        if isinstance(content, list):
            texts = [c.get("text") for c in content if isinstance(c, dict) and "text" in c]
            if texts:
                return result_value("\n".join(str(t) for t in texts))
        for key in ("structured_content", "structuredContent", "data"):
            if result.get(key) is not None:
                return result[key]
    return result


async def rollout(
    client: httpx.AsyncClient, *, base_url: str, body: dict[str, Any], traceparent: str = ""
) -> RolloutOutcome:
    env_spec, run_id = body["env"], body["run_id"]
    env_config = env_spec.get("config") or {}
    policy = body["policy"]["config"]
    limit = settings.EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES
    try:
        trace = {"traceparent": traceparent} if traceparent else None
        async with websockets.connect(
            ws_url(base_url), max_size=limit, open_timeout=10, additional_headers=trace
        ) as socket:
            session = OpenEnvSession(socket)
            reset = await session.send(
                {"type": "reset", "data": {"seed": env_spec["seed"], "episode_id": run_id}}
            )
            if env_config.get("mode") == kinds.ROLLOUT_TOOL:
                outcome = await _rollout_tool(session, env_config, env_spec["seed"], policy)
            else:
                outcome = await _agent(client, session, reset, env_config, policy)
            await socket.send(json.dumps({"type": "close"}))
            return outcome
    except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
        raise TaskAppError(unreachable(ws_url(base_url), exc), transient=True) from None
    except websockets.ConnectionClosed as exc:
        raise TaskAppError(f"OpenEnv closed the session: {exc}", transient=True) from None


async def _agent(
    client, session: OpenEnvSession, reset: dict, env_config: dict, policy: dict
) -> RolloutOutcome:
    loop = await agent_loop(
        client, env=session, observation=reset.get("observation"),
        config=kinds.LoopConfig.of(env_config), policy=policy,
        inference_url=policy["inference_url"],
    )  # fmt: skip
    terminated = any(e.done for e in loop.executions)
    details = {"terminated": terminated, "steps": len(loop.executions)}
    return environment_outcome(
        score=session.total_reward, loop=loop, kind=kinds.OPENENV, details=details
    )


async def _rollout_tool(
    session: OpenEnvSession, env_config: dict, seed: int, policy: dict
) -> RolloutOutcome:
    tool = env_config.get("tool") or kinds.DEFAULT_ROLLOUT_TOOL
    names = [t.get("name") for t in await session.list_tools()]
    if tool not in names:
        raise TaskAppError(
            f"the environment has no tool {tool!r} (it has {names})", transient=False
        )
    arguments = kinds.rollout_tool_arguments(env_config, seed=seed)
    arguments.update(
        base_url=policy["inference_url"], api_key=PLACEHOLDER_KEY, model=policy["model"]
    )
    started = time.perf_counter()
    step = await session.call_tool(tool, arguments)
    call = {
        "step": 1, "name": tool, "arguments": {**arguments, "base_url": INFERENCE_URL_SHOWN},
        "result": step.result, "error": step.error,
        "duration_ms": (time.perf_counter() - started) * 1000, "reward": step.reward,
    }  # fmt: skip
    if step.error is not None:
        raise TaskAppError(f"{tool} failed: {step.error}", transient=False)
    result = step.result
    if not isinstance(result, dict) or not isinstance(result.get("reward"), int | float):
        raise TaskAppError(
            f"{tool} answered no RolloutResult with a reward: {str(result)[:300]}", transient=False
        )
    if result.get("error"):
        raise TaskAppError(f"{tool}: {result['error']}", transient=False)
    details = {k: v for k, v in result.items() if k not in ("reward", "proxy_turns")}
    details["proxy_turns"] = len(result.get("proxy_turns") or [])
    trace = {
        "kind": kinds.OPENENV,
        "mode": kinds.ROLLOUT_TOOL,
        "tool_executions": [call],
        "result": result,
    }
    return environment_outcome(
        score=float(result["reward"]), kind=kinds.OPENENV, details=details, trace=trace
    )
