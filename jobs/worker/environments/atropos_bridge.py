"""`evalhub-atropos`: serve an Atropos environment (any `BaseEnv` subclass) as a synth task app.

    evalhub-atropos MODULE:CLASS [--config FILE] [--host H] [--port N] [--items N]

It builds the environment from the class's own `config_init()` (the JSON `--config` file's
`env` object overrides fields of its config, e.g. `tokenizer_name`; wandb is always off) and
runs its `setup()`. Per `POST /rollout` it points a shallow copy of the environment at the
request's `inference_url` (an `APIServerConfig` with `server_type="openai"` and health checks
off, so no probe call is billed), takes the seed's item, runs `collect_trajectory` once and
answers with the item's score as `outcome_reward` and the trajectory's messages (reasoning,
tool calls and results included) as the trace.

The seed's item: the class's own `item_for_seed(seed)` when it has one, else the
(seed % --items)-th item `get_next_item()` returns after setup (fetched in order, kept).

`BaseEnv` loads its tokenizer (`tokenizer_name`) when it is built: offline, point
`tokenizer_name` at a local directory with a saved tokenizer and set `HF_HUB_OFFLINE=1`.

This module runs outside Django and imports nothing of the project (`pip install
'evalhub[atropos]'` installs what it needs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import importlib
import inspect
import json
import logging
from pathlib import Path
from typing import Any

import uvicorn
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

log = logging.getLogger("evalhub.atropos")

# The key the environment's client sends: the interceptor drops it and uses the server's own.
PLACEHOLDER_KEY = "evalhub-placeholder-key"
UNUSED_URL = "http://127.0.0.1:9/v1"


def load_class(spec: str) -> type:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(f"expected MODULE:CLASS, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def server_config(*, base_url: str, model: str, timeout: int = 1200) -> APIServerConfig:
    return APIServerConfig(
        base_url=base_url, api_key=PLACEHOLDER_KEY, model_name=model,
        server_type="openai", health_check=False, timeout=timeout,
    )  # fmt: skip


class Bridge:
    def __init__(self, env_cls: type, overrides: dict[str, Any], items: int):
        config, _ = env_cls.config_init()
        config = config.model_copy(update={**overrides, "use_wandb": False})
        self.env = env_cls(config, [server_config(base_url=UNUSED_URL, model="unset")])
        self.items = max(1, items)
        self.cache: list[Any] = []
        self.lock = asyncio.Lock()
        self.ready = asyncio.Event()

    async def start(self) -> None:
        await self.env.setup()
        self.ready.set()

    async def item_for(self, seed: int) -> Any:
        own = getattr(self.env, "item_for_seed", None)
        if own is not None:
            item = own(seed)
            return await item if inspect.isawaitable(item) else item
        index = seed % self.items
        async with self.lock:
            while len(self.cache) <= index:
                self.cache.append(await self.env.get_next_item())
        return self.cache[index]

    def env_for(self, *, inference_url: str, model: str):
        """A shallow copy of the environment whose server is the attempt's interceptor URL."""
        env = copy.copy(self.env)
        env.server = ServerManager(
            [server_config(base_url=inference_url, model=model)],
            server_class=self.env.server_cls,
            reasoning_config=getattr(self.env.server, "reasoning_config", None),
        )
        return env

    async def rollout(self, request: Request) -> JSONResponse:
        await self.ready.wait()
        body = await request.json()
        seed = int(body["env"]["seed"])
        policy = body["policy"]["config"]
        env = self.env_for(
            inference_url=policy["inference_url"], model=policy.get("model") or "default"
        )
        item = await self.item_for(seed)
        try:
            scored, _backlog = await env.collect_trajectory(item)
        finally:
            for server in env.server.servers:
                await server.openai.close()
        if scored is None:
            return JSONResponse(
                {"detail": "collect_trajectory returned no trajectory"}, status_code=422
            )
        answer = rollout_answer(body["run_id"], scored, seed=seed)
        return JSONResponse(json.loads(json.dumps(answer, default=str)))


def rollout_answer(run_id: str, scored: Any, *, seed: int) -> dict[str, Any]:
    """A synth RolloutResponse from a ScoredDataItem (or a ScoredDataGroup's first rollout)."""
    score = scored.get("scores")
    messages = scored.get("messages")
    if isinstance(score, list):  # a group: its first rollout
        score = score[0] if score else None
        messages = messages[0] if messages else None
    details = {"seed": seed, "tokens": len(scored.get("tokens") or [])}
    return {
        "run_id": run_id,
        "metrics": {"outcome_reward": score, "details": details},
        "trace": {"kind": "atropos", "messages": messages or []},
    }


def build_app(bridge: Bridge) -> Starlette:
    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"healthy": bridge.ready.is_set()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await bridge.start()
        yield

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/rollout", bridge.rollout, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="evalhub-atropos", description=__doc__.split("\n")[0])
    parser.add_argument("env", help="the BaseEnv subclass, as MODULE:CLASS")
    parser.add_argument("--config", type=Path, help='JSON file: {"env": {field: value}}')
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--items", type=int, default=1000, help="items seeds cycle through")
    args = parser.parse_args(argv)
    overrides = json.loads(args.config.read_text()).get("env", {}) if args.config else {}
    bridge = Bridge(load_class(args.env), overrides, args.items)
    uvicorn.run(build_app(bridge), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
