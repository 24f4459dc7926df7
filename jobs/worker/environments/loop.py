"""The agent loop evalhub runs for environments that never call an LLM themselves.

Per seed attempt: the environment's tools become OpenAI `tools`; the model is called through the
attempt's interceptor URL with the job's `policy`; each tool call it makes is executed against
the environment and its result appended; the loop stops on the environment's terminal signal, a
reply without tool calls, or `max_steps` model turns. A tool that fails, or arguments that are
not JSON, go back to the model as the tool's result and are counted, never raised.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from jobs.kinds import LoopConfig
from jobs.worker.episode import TaskAppError

# What the loop (and OpenEnv's rollout tool) send as the model's key: the interceptor drops
# whatever key it is called with and uses the server's own.
PLACEHOLDER_KEY = "evalhub-placeholder-key"
# policy fields passed on to the model as they are.
POLICY_PARAMS = (
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop",
    "reasoning_effort", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs",
)  # fmt: skip
EXCERPT = 300

STOP_TERMINATED = "terminated"
STOP_NO_TOOL_CALLS = "no_tool_calls"
STOP_MAX_STEPS = "max_steps"


@dataclass
class StepOutcome:
    """What the environment answered to one tool call."""

    result: Any = None
    error: str | None = None
    reward: float | None = None
    done: bool = False


class ToolEnvironment(Protocol):
    async def list_tools(self) -> list[dict[str, Any]]:
        """[{name, description, input_schema}] as MCP lists them."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> StepOutcome: ...


@dataclass
class ToolExecution:
    step: int
    call_id: str
    name: str
    arguments: Any
    result: Any
    error: str | None
    duration_ms: float
    reward: float | None = None
    done: bool = False
    # When the call began (ISO 8601, UTC): its span's start in the exported trace.
    started_at: str | None = None


@dataclass
class LoopResult:
    messages: list[dict[str, Any]]
    executions: list[ToolExecution] = field(default_factory=list)
    steps: int = 0
    stop_reason: str = STOP_MAX_STEPS

    @property
    def tool_errors(self) -> int:
        return sum(1 for e in self.executions if e.error is not None)

    def trace(self, kind: str) -> dict[str, Any]:
        """The seed's task trace: the loop's conversation and its tool executions, in order."""
        return {
            "kind": kind,
            "messages": self.messages,
            "tool_executions": [asdict(e) for e in self.executions],
            "steps": self.steps,
            "stop_reason": self.stop_reason,
        }


def openai_tools(listed: list[dict[str, Any]], overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """MCP tool listings as OpenAI `tools`, with `tool_schemas` overriding input schemas."""
    tools = []
    for tool in listed:
        schema = overrides.get(tool["name"]) or tool.get("input_schema") or {}
        if not schema.get("type"):
            schema = {"type": "object", "properties": {}, **schema}
        function = {"name": tool["name"], "description": tool.get("description") or ""}
        tools.append({"type": "function", "function": {**function, "parameters": schema}})
    return tools


def observation_text(observation: Any) -> str:
    return observation if isinstance(observation, str) else json.dumps(observation, default=str)


async def agent_loop(
    client: httpx.AsyncClient,
    *,
    env: ToolEnvironment,
    observation: Any,
    config: LoopConfig,
    policy: dict[str, Any],
    inference_url: str,
) -> LoopResult:
    tools = openai_tools(await env.list_tools(), config.tool_schemas)
    prompt = config.user_prompt_template.replace("{observation}", observation_text(observation))
    loop = LoopResult(
        messages=[
            {"role": "system", "content": config.system_prompt},
            {"role": "user", "content": prompt},
        ]
    )
    for step in range(1, config.max_steps + 1):
        reply = await chat(
            client,
            inference_url=inference_url,
            policy=policy,
            body_messages=loop.messages,
            tools=tools,
        )
        loop.messages.append(reply)
        loop.steps = step
        calls = reply.get("tool_calls") or []
        if not calls:
            loop.stop_reason = STOP_NO_TOOL_CALLS
            return loop
        done = False
        for call in calls:
            execution = await execute(env, call, step)
            loop.executions.append(execution)
            loop.messages.append(tool_message(execution))
            done = done or execution.done
        if done:
            loop.stop_reason = STOP_TERMINATED
            return loop
    loop.stop_reason = STOP_MAX_STEPS
    return loop


async def chat(
    client: httpx.AsyncClient,
    *,
    inference_url: str,
    policy: dict[str, Any],
    body_messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
) -> dict[str, Any]:
    """One model call through the interceptor; the assistant message it answered."""
    body: dict[str, Any] = {"model": policy["model"], "messages": body_messages}
    if tools:
        body["tools"] = tools
    body.update({k: policy[k] for k in POLICY_PARAMS if policy.get(k) is not None})
    body.update(policy.get("extra_body") or {})
    try:
        response = await client.post(
            f"{inference_url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {PLACEHOLDER_KEY}"},
        )
    except httpx.HTTPError as exc:
        raise TaskAppError(f"the model call failed: {type(exc).__name__}", transient=True) from None
    if response.status_code >= 400:
        raise _model_error(response)
    try:
        message = response.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise TaskAppError(
            f"the model's answer has no message: {response.text[:EXCERPT]}", transient=False
        ) from None
    kept = {"role": "assistant", "content": message.get("content")}
    for name in ("tool_calls", "reasoning_content", "reasoning"):
        if message.get(name):
            kept[name] = message[name]
    return kept


def _model_error(response: httpx.Response) -> TaskAppError:
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    kind = error.get("type") if isinstance(error, dict) else None
    text = (error.get("message") if isinstance(error, dict) else None) or response.text[:EXCERPT]
    transient = kind != "budget_exceeded" and (
        response.status_code == 429 or response.status_code >= 500
    )
    return TaskAppError(
        f"the model call failed: HTTP {response.status_code}{f' {kind}' if kind else ''}: {text}",
        transient=transient,
    )


async def execute(env: ToolEnvironment, call: dict[str, Any], step: int) -> ToolExecution:
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    raw = function.get("arguments") or "{}"
    started, started_at = time.perf_counter(), datetime.now(UTC).isoformat()
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(arguments, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        outcome = StepOutcome(error=f"the arguments are not a JSON object: {exc}")
        arguments = raw
    else:
        outcome = await env.call_tool(name, arguments)
    return ToolExecution(
        step=step,
        call_id=str(call.get("id") or ""),
        name=name,
        arguments=arguments,
        result=outcome.result,
        error=outcome.error,
        duration_ms=(time.perf_counter() - started) * 1000,
        reward=outcome.reward,
        done=outcome.done,
        started_at=started_at,
    )


def tool_message(execution: ToolExecution) -> dict[str, Any]:
    if execution.error is not None:
        content = f"Error: {execution.error}"
    else:
        content = observation_text(execution.result)
    return {"role": "tool", "tool_call_id": execution.call_id, "content": content}


def result_value(text: str) -> Any:
    """A tool's text result as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text
