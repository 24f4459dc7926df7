"""An example task app: a weather agent, written with the OpenAI SDK.

evalhub POSTs `/rollout` once per seed of a job. This app turns the seed into a task (report the
temperature in one city), lets the model work through `policy.config.inference_url` (evalhub's
LLM interceptor: an OpenAI-compatible base URL that records every call's tokens, cost and
messages, and holds the provider key), runs the `get_weather` tool when the model calls it, and
scores the final answer: 1.0 for the right temperature, less the further off it is.

Run it on its own and point a job at it (see examples/README.md):

    .venv/bin/python -m uvicorn examples.weather_task_app:app --port 8001

Set ENVIRONMENT_API_KEY to make it refuse requests without that key (send it with the job as
`task_app_api_key`). With `env_config: {"demo_faults": true}` a few seeds fail the way real
environments do, so a demo job has failures to look at (see `injected_fault`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openai import AsyncOpenAI

TEMPERATURES_C = {"Paris": 18, "Oslo": 4, "Cairo": 31, "Lima": 22, "Tokyo": 15, "Denver": 9}
CITIES = [*TEMPERATURES_C, "Atlantis"]  # Atlantis has no weather station: its seeds fail

GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SYSTEM = "You are a weather assistant. Look the weather up with get_weather; never guess."

app = FastAPI(title="weather task app")
tries_per_seed: Counter[int] = Counter()


@app.get("/health")
async def health() -> dict[str, bool]:
    return {"healthy": True}


@app.post("/rollout")
async def rollout(request: Request) -> JSONResponse:
    key = os.environ.get("ENVIRONMENT_API_KEY")
    if key and request.headers.get("x-api-key") != key:
        return JSONResponse({"detail": "wrong or missing X-API-Key"}, status_code=401)
    body = await request.json()
    seed = int(body["env"]["seed"])
    config = body["env"].get("config") or {}
    policy = body["policy"]["config"]
    if config.get("demo_faults") and (fault := injected_fault(seed)):
        return fault
    city = CITIES[seed % len(CITIES)]
    if city not in TEMPERATURES_C:
        return JSONResponse({"detail": f"no weather station in {city}"}, status_code=422)

    messages, answer = await run_agent(policy, city)
    expected = TEMPERATURES_C[city]
    said = [int(n) for n in re.findall(r"-?\d+", answer or "")]
    error = min((abs(n - expected) for n in said), default=None)
    score = 0.0 if error is None else max(0.0, 1.0 - error / 30)
    return JSONResponse(
        {
            "run_id": body["run_id"],
            "trace_correlation_id": body.get("trace_correlation_id"),
            "reward_info": {
                "outcome_reward": round(score, 3),
                "outcome_objectives": {"reward": round(score, 3), "exact": float(error == 0)},
                "details": {"city": city, "expected_c": expected, "answer": answer},
            },
            "trace": {"city": city, "messages": messages},
        }
    )


async def run_agent(policy: dict[str, Any], city: str) -> tuple[list[dict[str, Any]], str]:
    """One tool round, then the answer. The key is evalhub's business: any string will do."""
    client = AsyncOpenAI(base_url=policy["inference_url"], api_key="evalhub-holds-the-key")
    model = policy.get("model", "gpt-4o-mini")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"What is the temperature in {city} now, in Celsius?"},
    ]
    first = await client.chat.completions.create(
        model=model, messages=messages, tools=[GET_WEATHER]
    )
    reply = first.choices[0].message
    messages.append(reply.model_dump(exclude_none=True))
    if not reply.tool_calls:
        return messages, reply.content or ""
    for call in reply.tool_calls:
        arguments = json.loads(call.function.arguments or "{}")
        messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)}
        )
    final = await client.chat.completions.create(
        model=model, messages=messages, tools=[GET_WEATHER], tool_choice="none"
    )
    answer = final.choices[0].message.content or ""
    messages.append({"role": "assistant", "content": answer})
    return messages, answer


def get_weather(city: str = "", unit: str = "C", **_: Any) -> str:
    """The tool. Unknown cities get an error the model can read."""
    if city not in TEMPERATURES_C:
        return f"error: no weather station in {city!r}"
    celsius = TEMPERATURES_C[city]
    value = celsius if unit.upper().startswith("C") else round(celsius * 9 / 5 + 32)
    return f"{value} degrees {unit}"


def injected_fault(seed: int) -> JSONResponse | None:
    """Demo only: every 5th seed's environment is busy on its first try (evalhub retries it);
    every 11th crashes every time (evalhub retries, then marks the seed failed)."""
    tries_per_seed[seed] += 1
    if seed % 11 == 10:
        return JSONResponse({"detail": "environment crashed: simulator segfault"}, status_code=500)
    if seed % 5 == 3 and tries_per_seed[seed] == 1:
        return JSONResponse({"detail": "environment busy, try again"}, status_code=503)
    return None
