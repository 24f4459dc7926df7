"""eval-protocol MCP-Gym servers (`McpGym`): tools over MCP's streamable HTTP at `/mcp`, reward
and termination on an HTTP control plane beside it.

Per attempt: a fresh MCP session whose `clientInfo._extra` carries the attempt's run id as the
session id, the seed and `env_config.env_context`; the seed applied again through
`POST /control/reset_session` (current releases create a session's environment unseeded);
the first observation from `GET /control/initial_state`; the agent loop over the server's
tools, with `GET /control/status` after every tool call. The score is the control plane's
`total_reward` at the end.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import Implementation

from jobs import kinds
from jobs.fields import url_shown
from jobs.worker.environments.loop import StepOutcome, agent_loop, result_value
from jobs.worker.environments.outcome import environment_outcome, unreachable, wrong_kind
from jobs.worker.episode import RolloutOutcome, TaskAppError

CLIENT_NAME = "evalhub"
CLIENT_VERSION = "0.1.0"
CONTROL_TIMEOUT_S = 30.0
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def control_base(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/mcp")


async def probe(client: httpx.AsyncClient, *, base_url: str) -> str | None:
    """None when an MCP server with an MCP-Gym control plane answers at `base_url`."""
    init = {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": CLIENT_NAME, "version": CLIENT_VERSION}},
    }  # fmt: skip
    try:
        resp = await client.post(base_url, json=init, headers=MCP_HEADERS, timeout=10.0)
        session = resp.headers.get("mcp-session-id")
        if resp.status_code != 200 or '"result"' not in resp.text:
            return wrong_kind(
                base_url, "an MCP server", f"POST initialize answered HTTP {resp.status_code}"
            )
        if session:  # the probe's own transport session, closed at once
            await client.delete(base_url, headers={"mcp-session-id": session}, timeout=10.0)
        reset = await client.post(
            f"{control_base(base_url)}/control/reset_session", json={}, timeout=10.0
        )
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return unreachable(base_url, exc)
    except httpx.HTTPError as exc:
        return wrong_kind(base_url, "an MCP server", f"{type(exc).__name__}: {exc}")
    if reset.status_code != 400 or "mcp-session-id" not in reset.text:
        return wrong_kind(
            base_url,
            "an MCP-Gym server",
            f"no control plane: POST /control/reset_session answered HTTP {reset.status_code}",
        )
    return None


class McpGymEnvironment:
    """The tools of one MCP session; each call followed by a look at the control plane."""

    def __init__(self, session: ClientSession, control: Control):
        self.session = session
        self.control = control
        self.total_reward = 0.0

    async def list_tools(self) -> list[dict[str, Any]]:
        listed = await self.session.list_tools()
        return [
            {"name": t.name, "description": t.description, "input_schema": t.inputSchema}
            for t in listed.tools
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> StepOutcome:
        result = await self.session.call_tool(name, arguments)
        text = "\n".join(getattr(c, "text", "") for c in result.content if c.type == "text")
        status = await self.control.get("/control/status")
        total = float(status.get("total_reward") or 0.0)
        reward, self.total_reward = total - self.total_reward, total
        done = bool(status.get("terminated") or status.get("truncated"))
        if result.isError:
            return StepOutcome(error=text or "the tool failed", reward=reward, done=done)
        return StepOutcome(result=result_value(text), reward=reward, done=done)


class Control:
    """The MCP-Gym control plane of one session (the run id is its session id)."""

    def __init__(
        self, client: httpx.AsyncClient, base_url: str, session_id: str, extra: dict[str, str]
    ):
        self.client = client
        self.base = control_base(base_url)
        self.headers = {"mcp-session-id": session_id, **extra}

    async def get(self, path: str) -> dict[str, Any]:
        return self._read(
            await self.client.get(
                f"{self.base}{path}", headers=self.headers, timeout=CONTROL_TIMEOUT_S
            ),
            path,
        )

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = await self.client.post(
            f"{self.base}{path}", json=body, headers=self.headers, timeout=CONTROL_TIMEOUT_S
        )
        return self._read(resp, path)

    @staticmethod
    def _read(resp: httpx.Response, path: str) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError:
            data = None
        if resp.status_code != 200 or not isinstance(data, dict) or "error" in data:
            raise TaskAppError(
                f"MCP-Gym control plane {path} answered HTTP {resp.status_code}: {resp.text[:300]}",
                transient=resp.status_code >= 500,
                http_status=resp.status_code,
            )
        return data


async def rollout(
    client: httpx.AsyncClient, *, base_url: str, body: dict[str, Any], traceparent: str = ""
) -> RolloutOutcome:
    env_spec, run_id = body["env"], body["run_id"]
    seed, env_config = env_spec["seed"], env_spec.get("config") or {}
    policy = body["policy"]["config"]
    extra = {"session_id": run_id, "seed": seed, "config": env_config.get("env_context") or {}}
    info = Implementation(name=CLIENT_NAME, version=CLIENT_VERSION, _extra=extra)
    trace = {"traceparent": traceparent} if traceparent else {}
    control = Control(client, base_url, run_id, trace)
    async with _session(base_url, info, trace) as session:
        await control.get("/control/initial_state")  # makes the server-side session
        await control.post("/control/reset_session", {"seed": seed})
        observation = await control.get("/control/initial_state")
        env = McpGymEnvironment(session, control)
        loop = await agent_loop(
            client, env=env, observation=observation, config=kinds.LoopConfig.of(env_config),
            policy=policy, inference_url=policy["inference_url"],
        )  # fmt: skip
        status = await control.get("/control/status")
    details = {
        "terminated": bool(status.get("terminated")),
        "truncated": bool(status.get("truncated")),
        "steps": status.get("step_count"),
    }
    score = float(status.get("total_reward") or 0.0)
    return environment_outcome(score=score, loop=loop, kind=kinds.MCP_GYM, details=details)


@contextlib.asynccontextmanager
async def _session(base_url: str, info: Implementation, headers: dict[str, str]):
    """An initialized MCP session; transport failures become TaskAppErrors."""
    try:
        async with (
            streamablehttp_client(base_url, headers=headers, terminate_on_close=True) as (
                read,
                write,
                _,
            ),
            ClientSession(read, write, client_info=info) as session,
        ):
            await session.initialize()
            yield session
    except TaskAppError:
        raise
    except Exception as exc:  # the MCP client raises from its task groups
        raise _transport_error(base_url, exc) from None


def _transport_error(base_url: str, exc: BaseException) -> TaskAppError:
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, TaskAppError):
        return leaf
    if isinstance(leaf, httpx.ConnectError | httpx.ConnectTimeout):
        return TaskAppError(unreachable(base_url, leaf), transient=True)
    return TaskAppError(
        f"MCP session with {url_shown(base_url)} failed: {type(leaf).__name__}: {leaf}",
        transient=False,
    )
