"""What the runner calls for any kind of job: the probe before it starts, and one rollout.

`synth` goes to the task-app client (`jobs.taskapp`) as it always has; the other kinds to their
adapter. Every failure is a `TaskAppError`, so the runner retries and records them alike.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx

from jobs import taskapp
from jobs.environments import kinds, mcp_gym, openenv

ADAPTERS = {kinds.MCP_GYM: mcp_gym, kinds.OPENENV: openenv}


async def probe(
    client: httpx.AsyncClient, *, kind: str, base_url: str, api_key: str | None
) -> str | None:
    """None when a server of `kind` answers at `base_url`; else why the job cannot run."""
    if kind == kinds.SYNTH:
        return await taskapp.task_app_probe(client, base_url=base_url, api_key=api_key)
    return await ADAPTERS[kind].probe(client, base_url=base_url)


async def rollout(
    client: httpx.AsyncClient,
    *,
    session: aiohttp.ClientSession,
    kind: str,
    base_url: str,
    api_key: str | None,
    body: dict[str, Any],
) -> taskapp.RolloutOutcome:
    """One seed attempt; `body` is the synth RolloutRequest the runner built (the other kinds
    read the seed, env_config, policy and inference URL from it). A synth rollout is posted
    with `session`, the others with `client`."""
    if kind == kinds.SYNTH:
        return await taskapp.rollout_post(session, base_url=base_url, api_key=api_key, body=body)
    return await ADAPTERS[kind].rollout(client, base_url=base_url, body=body)
