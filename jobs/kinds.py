"""The kinds of environment a job can run against, and the settings each needs in `env_config`.

`synth` is a task app speaking synth's `/rollout` contract (it drives the LLM itself); `mcp_gym`
an eval-protocol MCP-Gym server and `openenv` an OpenEnv server, both driven by evalhub's own
agent loop (`jobs.worker.environments.loop`) or, for OpenEnv's `rollout_tool` mode, by one tool call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SYNTH = "synth"
MCP_GYM = "mcp_gym"
OPENENV = "openenv"
KINDS = (SYNTH, MCP_GYM, OPENENV)

AGENT = "agent"
ROLLOUT_TOOL = "rollout_tool"
OPENENV_MODES = (AGENT, ROLLOUT_TOOL)

DEFAULT_MAX_STEPS = 20
MAX_MAX_STEPS = 1000
DEFAULT_SYSTEM_PROMPT = (
    "You act in an environment through the tools you are given. Call them until the task is done."
)
DEFAULT_USER_PROMPT = "{observation}"
DEFAULT_ROLLOUT_TOOL = "run_rollout"


# The `env_config` keys evalhub itself reads for each kind it drives (a synth task app reads its
# own: every key is passed through to it). Other keys are named in the job's warnings.
_LOOP_KEYS = ("system_prompt", "user_prompt_template", "max_steps", "tool_schemas")
ENV_CONFIG_KEYS = {
    MCP_GYM: (*_LOOP_KEYS, "env_context"),
    OPENENV: (*_LOOP_KEYS, "mode", "tool", "tool_args", "tasks"),
}


@dataclass(frozen=True)
class LoopConfig:
    """The agent loop's settings, from `env_config`."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    user_prompt_template: str = DEFAULT_USER_PROMPT
    max_steps: int = DEFAULT_MAX_STEPS
    tool_schemas: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, env_config: dict[str, Any]) -> LoopConfig:
        return cls(
            system_prompt=env_config.get("system_prompt") or DEFAULT_SYSTEM_PROMPT,
            user_prompt_template=env_config.get("user_prompt_template") or DEFAULT_USER_PROMPT,
            max_steps=env_config.get("max_steps") or DEFAULT_MAX_STEPS,
            tool_schemas=env_config.get("tool_schemas") or {},
        )


def settings_problems(
    kind: str, env_config: dict[str, Any], policy: dict[str, Any]
) -> dict[str, str]:
    """{field: why} for a job of `kind` whose settings cannot work; empty when they can."""
    if kind == SYNTH:
        return {}
    problems: dict[str, str] = {}
    model = policy.get("model")
    if not isinstance(model, str) or not model.strip():
        problems["policy"] = f"a {kind} job needs policy.model: evalhub calls the model itself"
    elif not isinstance(policy.get("extra_body", {}), dict):
        problems["policy"] = "extra_body must be an object (fields added to each model call)"
    if why := _loop_problem(env_config):
        problems["env_config"] = why
    elif kind == OPENENV and (why := _openenv_problem(env_config)):
        problems["env_config"] = why
    elif kind == MCP_GYM and not isinstance(env_config.get("env_context", {}), dict):
        problems["env_config"] = "env_context must be an object"
    return problems


def _loop_problem(env_config: dict[str, Any]) -> str | None:
    for name in ("system_prompt", "user_prompt_template"):
        if not isinstance(env_config.get(name, ""), str | None):
            return f"{name} must be a string"
    template = env_config.get("user_prompt_template")
    if template and "{observation}" not in template:
        return "user_prompt_template must contain {observation}"
    steps = env_config.get("max_steps")
    if steps is not None and (
        isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_MAX_STEPS
    ):
        return f"max_steps must be an integer from 1 to {MAX_MAX_STEPS}"
    schemas = env_config.get("tool_schemas")
    if schemas is not None and (
        not isinstance(schemas, dict) or not all(isinstance(v, dict) for v in schemas.values())
    ):
        return "tool_schemas must map tool names to JSON Schema objects"
    return None


def _openenv_problem(env_config: dict[str, Any]) -> str | None:
    mode = env_config.get("mode")
    if mode not in OPENENV_MODES:
        return f"mode must be one of {', '.join(OPENENV_MODES)} for an openenv job; got {mode!r}"
    if mode == AGENT:
        return None
    tool = env_config.get("tool", DEFAULT_ROLLOUT_TOOL)
    if not isinstance(tool, str) or not tool:
        return "tool must be the name of the environment's rollout tool"
    tasks = env_config.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, dict) for t in tasks):
        return "tasks must be a non-empty list of objects (the task of seed s is tasks[s % len])"
    if not isinstance(env_config.get("tool_args", {}), dict):
        return "tool_args must be an object"
    return None


def rollout_tool_arguments(env_config: dict[str, Any], *, seed: int) -> dict[str, Any]:
    """The caller's arguments of a `rollout_tool` call for `seed`: the seed's task merged over
    `tool_args` (evalhub adds base_url, api_key and model)."""
    tasks = env_config["tasks"]
    return {**(env_config.get("tool_args") or {}), **tasks[seed % len(tasks)]}
