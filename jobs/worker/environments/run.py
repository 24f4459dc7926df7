"""What the runner calls for any kind of job: the probe before it starts, and one rollout.

`synth` goes to the task-app client (`jobs.worker.taskapp`) as it always has; the other kinds to their
adapter. Every failure is a `TaskAppError`, so the runner retries and records them alike.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx

from jobs import kinds
from jobs.worker import taskapp
from jobs.worker.answer_budget import AnswerHold
from jobs.worker.environments import openenv
from jobs.worker.episode import RolloutOutcome


def _adapter(kind: str):
    """The module that speaks `kind`'s protocol. MCP-Gym's is imported the first time a job of
    its kind runs: the MCP SDK takes most of a second to import, and a worker that never runs
    such a job need not pay it as it starts."""
    if kind == kinds.OPENENV:
        return openenv
    if kind == kinds.MCP_GYM:
        import jobs.worker.environments.mcp_gym as mcp_gym

        return mcp_gym
    raise ValueError(f"no environment adapter for task_app_kind {kind!r}")


async def probe(
    client: httpx.AsyncClient, *, kind: str, base_url: str, api_key: str | None
) -> str | None:
    """None when a server of `kind` answers at `base_url`; else why the job cannot run."""
    if kind == kinds.SYNTH:
        return await taskapp.task_app_probe(client, base_url=base_url, api_key=api_key)
    return await _adapter(kind).probe(client, base_url=base_url)


async def rollout(
    client: httpx.AsyncClient,
    *,
    session: aiohttp.ClientSession,
    kind: str,
    base_url: str,
    api_key: str | None,
    body: dict[str, Any],
    hold: AnswerHold,
    traceparent: str = "",
) -> RolloutOutcome:
    """One seed attempt; `body` is the synth RolloutRequest the runner built (the other kinds
    read the seed, env_config, policy and inference URL from it). A synth rollout is posted
    with `session`, the others with `client`; each sends `traceparent` (W3C trace context).
    Either outcome holds what it costs of the worker's answer budget in `hold`: a synth answer
    waits for its share as it is read; an adapter's, built up as its loop ran, is counted once
    it is whole."""
    if kind == kinds.SYNTH:
        return await taskapp.rollout_post(
            session, base_url=base_url, api_key=api_key, body=body, hold=hold,
            traceparent=traceparent,
        )  # fmt: skip
    outcome = await _adapter(kind).rollout(
        client, base_url=base_url, body=body, traceparent=traceparent
    )
    return taskapp.kept_as_text(outcome, hold)
