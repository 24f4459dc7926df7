"""A real task app for the tests: FastAPI, served on a loopback port with `serve_asgi`.

What it does for a seed is driven by the job's `env_config` (keys are seeds as strings, since
JSON objects have string keys):

- default: answers metrics with `outcome_reward = score_of(seed)` after `delay_s` seconds;
- `status_always: {"3": 400}`: always answers that HTTP status for seed 3;
- `fail_times: {"5": 2}`: answers 503 the first 2 times seed 5 is asked, then succeeds;
- `busy_times: {"5": 4}`: answers 429 with `Retry-After: 0.2` the first 4 times, then succeeds;
- `hang: [7]`: never answers seed 7 (until the client goes away);
- `garbage: {"8": "not_json" | "no_metrics" | "wrong_types" | "list"}`: a malformed answer;
- `score_field: "reward_mean"`: report the score only in that metrics field;
- `call_llm: true`: one chat completion through `policy.config.inference_url` per rollout;
- `call_llm: "tools"`: a small agent loop through `policy.config.inference_url` instead: a call
  offering the `get_weather` tool (asking the fake provider to reason first, see
  `evalhub/fakeprovider`), then, with the tool's result, a call for the final answer;
- `call_llm: "responses"` / `"messages"`: the same agent loop spoken in OpenAI's Responses API
  (the `openai` SDK) or Anthropic's Messages API (the `anthropic` SDK), its final call streamed;
- `call_llm: "chat"`: two chat completions with the `openai` SDK (its default retries), the
  second carrying the first's answer and a follow-up (`follow_ups: {"1": "..."}` changes seed 1's;
  `stream: true` streams both); the answers go back in the trace (`trace.answers`);
- `call_llm: "until_refused"`: chat completions one after another, up to 10, until one is not
  answered 200 (a rollout that keeps going until its rollout limit stops it);
- `echo_secrets: true`: the `status_always` answers repeat the key and the inference URL;
- `status_first: {"1": 2}`: answers 400 the first 2 times seed 1 is asked (over every job the
  app serves), then succeeds: a seed that fails once and passes when rerun;
- `scores: {"4": [1.0, 0.0]}` or `{"4": 0.9}`: the score of seed 4 on its 1st, 2nd, ... call
  (the last one repeats), or on every call, instead of `score_of(4)`.

It records every request and its own maximum number of rollouts in flight (`state`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse


def score_of(seed: int) -> float:
    """The score the task app gives a seed: deterministic, distinct, in [0, 1)."""
    return (seed * 37 % 100) / 100


@dataclass
class TaskAppState:
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    calls_per_seed: Counter = field(default_factory=Counter)
    in_flight: int = 0
    max_in_flight: int = 0
    health_calls: int = 0
    llm_answers: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seeds_called(self) -> Counter:
        with self.lock:
            return Counter(self.calls_per_seed)


def task_app_create(
    *, delay_s: float = 0.0, keep_requests: bool = True
) -> tuple[FastAPI, TaskAppState]:
    """The app and what it saw; with `keep_requests` False (the benchmarks), not each request's
    body and headers: a heap that grows by every request makes the full garbage collections of
    a long run slower and slower (100 ms each after 8,000 rollouts)."""
    app = FastAPI()
    state = TaskAppState()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        state.health_calls += 1
        return {"healthy": True}

    @app.post("/rollout")
    async def rollout(request: Request):
        body = await request.json()
        seed = int(body["env"]["seed"])
        config = body["env"].get("config") or {}
        key = str(seed)
        with state.lock:
            if keep_requests:
                state.requests.append(body)
                state.headers.append(dict(request.headers))
            state.calls_per_seed[seed] += 1
            calls = state.calls_per_seed[seed]
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            await asyncio.sleep(float(config.get("delay_s", delay_s)))
            if seed in config.get("hang", []):
                # Until the client goes away (a timeout or a cancel closes the connection).
                while not await request.is_disconnected():
                    await asyncio.sleep(0.05)
                return PlainTextResponse("client left", status_code=499)
            if key in config.get("status_always", {}):
                status = int(config["status_always"][key])
                if config.get("echo_secrets"):  # a careless task app repeating what it got
                    echoed = f"key={request.headers.get('x-api-key')} url={body['policy']['config']['inference_url']}"
                    return PlainTextResponse(echoed, status_code=status)
                return PlainTextResponse(f"seed {seed} always fails", status_code=status)
            if calls <= int(config.get("status_first", {}).get(key, 0)):
                return PlainTextResponse(f"seed {seed} fails this time", status_code=400)
            if calls <= int(config.get("fail_times", {}).get(key, 0)):
                return PlainTextResponse("busy, try again", status_code=503)
            if calls <= int(config.get("busy_times", {}).get(key, 0)):
                return PlainTextResponse(
                    "at capacity", status_code=429, headers={"Retry-After": "0.2"}
                )
            garbage = config.get("garbage", {}).get(key)
            if garbage == "not_json":
                return PlainTextResponse("<html>oops</html>")
            if garbage == "no_metrics":
                return JSONResponse({"run_id": body["run_id"], "trace": None})
            if garbage == "wrong_types":
                return JSONResponse({"run_id": body["run_id"], "metrics": {"outcome_reward": "1"}})
            if garbage == "list":
                return JSONResponse([1, 2, 3])
            answers: list[Any] = []
            if config.get("call_llm") == "chat":
                answers = await _chat_agent(body, config)
                state.llm_answers.extend(answers)
            elif config.get("call_llm") == "tools":
                state.llm_answers.extend(await _call_llm_with_tool(body))
            elif config.get("call_llm") in ("responses", "messages"):
                agent = _responses_agent if config["call_llm"] == "responses" else _messages_agent
                state.llm_answers.extend(await agent(body))
            elif config.get("call_llm") == "until_refused":
                for _ in range(10):
                    state.llm_answers.append(await _call_llm(body))
                    if state.llm_answers[-1]["status"] != 200:
                        break
            elif config.get("call_llm"):
                state.llm_answers.append(await _call_llm(body))
            score = _score(seed, calls, config.get("scores", {}).get(key))
            field_name = config.get("score_field", "outcome_reward")
            metrics: dict[str, Any] = {
                field_name: score,
                "events_score": score / 2,
                "num_steps": 1,
                "details": {"verifier_score": 1.0 - score},
            }
            return JSONResponse(
                {
                    "run_id": body["run_id"],
                    "metrics": metrics,
                    "trace": {
                        "seed": seed,
                        "steps": [{"action": "answer", "reward": score}],
                        **({"answers": answers} if answers else {}),
                    },  # fmt: skip
                    "trace_correlation_id": body["policy"]["config"].get("trace_correlation_id"),
                    "aborted": False,
                }
            )
        finally:
            with state.lock:
                state.in_flight -= 1

    return app, state


def _score(seed: int, calls: int, scores: Any) -> float:
    if isinstance(scores, list) and scores:
        return float(scores[min(calls, len(scores)) - 1])
    return score_of(seed) if scores is None else float(scores)


async def _call_llm(body: dict[str, Any]) -> Any:
    config = body["policy"]["config"]
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{config['inference_url']}/chat/completions",
            json={
                "model": config.get("model", "gpt-4o-mini"),
                "messages": [{"role": "user", "content": f"seed {body['env']['seed']}"}],
            },
        )
        return {"status": response.status_code, "body": response.json()}


AGENT_SYSTEM = "You are a weather agent. Look the weather up with the get_weather tool."
AGENT_REASONING = "The user asks about the weather; I should call get_weather, not guess."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city now",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def weather_of(arguments: dict[str, Any]) -> str:
    """The get_weather tool's result for the arguments the model chose."""
    return f"{arguments.get('city', '?')}: 18 degrees {arguments.get('unit', 'C')}, light rain"


async def _call_llm_with_tool(body: dict[str, Any]) -> list[Any]:
    """A policy's turn as agents take it: the model calls the tool, the task app runs it and
    sends the result back for the final answer."""
    config = body["policy"]["config"]
    url = f"{config['inference_url']}/chat/completions"
    model = config.get("model", "gpt-4o-mini")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": f"Seed {body['env']['seed']}: what is the weather in Paris?"},
    ]
    async with httpx.AsyncClient(timeout=60) as client:
        first = await client.post(
            url,
            json={
                "model": model,
                "messages": messages,
                "tools": [WEATHER_TOOL],
                "fake": {"reasoning": AGENT_REASONING, "reasoning_tokens": 12},
            },
        )
        first.raise_for_status()
        assistant = first.json()["choices"][0]["message"]
        messages.append(assistant)
        for call in assistant.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"])
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": weather_of(arguments)}
            )
        second = await client.post(
            url,
            json={
                "model": model,
                "messages": messages,
                "tools": [WEATHER_TOOL],
                "tool_choice": "none",
            },
        )
        second.raise_for_status()
    return [first.json(), second.json()]


FOLLOW_UP = "Now add 1 to that."


async def _chat_agent(body: dict[str, Any], env_config: dict[str, Any]) -> list[str]:
    """Two turns of a chat with the `openai` SDK as task apps use it (retries on, streamed when
    `env_config.stream`); the answers it read."""
    config, seed = body["policy"]["config"], str(body["env"]["seed"])
    follow_up = (env_config.get("follow_ups") or {}).get(seed, FOLLOW_UP)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Seed {seed}: what is 2 + {seed}?"}
    ]
    answers = []
    async with openai.AsyncOpenAI(base_url=config["inference_url"], api_key="task-app") as client:
        for turn in range(2):
            asked = {"model": config.get("model", "gpt-4o-mini"), "messages": messages}
            if env_config.get("stream"):
                stream = await client.chat.completions.create(**asked, stream=True)
                said = "".join(
                    [c.choices[0].delta.content or "" async for c in stream if c.choices]
                )
            else:
                said = (await client.chat.completions.create(**asked)).choices[0].message.content
            answers.append(said)
            if turn == 0:
                messages += [
                    {"role": "assistant", "content": said},
                    {"role": "user", "content": follow_up},
                ]
    return answers


def _question(body: dict[str, Any]) -> str:
    return f"Seed {body['env']['seed']}: what is the weather in Paris?"


async def _responses_agent(body: dict[str, Any]) -> list[Any]:
    """`_call_llm_with_tool`'s turn in the Responses API: the model's output items go back in
    the input with the tool's result; the final answer comes as a stream of events."""
    config = body["policy"]["config"]
    model = config.get("model", "gpt-4o-mini")
    tools = [{"type": "function", **WEATHER_TOOL["function"]}]
    items: list[Any] = [{"role": "user", "content": _question(body)}]
    async with openai.AsyncOpenAI(
        base_url=config["inference_url"], api_key="task-app", max_retries=0
    ) as client:
        first = await client.responses.create(
            model=model, instructions=AGENT_SYSTEM, input=items, tools=tools,
            extra_body={"fake": {"reasoning": AGENT_REASONING}},
        )  # fmt: skip
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items += [
            {"type": "function_call_output", "call_id": item.call_id,
             "output": weather_of(json.loads(item.arguments))}
            for item in first.output if item.type == "function_call"
        ]  # fmt: skip
        stream = await client.responses.create(
            model=model, instructions=AGENT_SYSTEM, input=items, tools=tools, stream=True
        )
        events = [event async for event in stream]
    return [first.model_dump(), events[-1].response.model_dump()]


async def _messages_agent(body: dict[str, Any]) -> list[Any]:
    """`_call_llm_with_tool`'s turn in Anthropic's Messages API: the model's content blocks go
    back as the assistant's message, the tool's result as the user's; the final answer is
    streamed."""
    config = body["policy"]["config"]
    model = config.get("model", "claude-sonnet-4-5")
    function = WEATHER_TOOL["function"]
    tools = [{"name": function["name"], "description": function["description"],
              "input_schema": function["parameters"]}]  # fmt: skip
    messages: list[Any] = [{"role": "user", "content": _question(body)}]
    async with anthropic.AsyncAnthropic(
        base_url=config["inference_url"], api_key="task-app", max_retries=0
    ) as client:
        first = await client.messages.create(
            model=model, max_tokens=512, system=AGENT_SYSTEM, messages=messages, tools=tools,
            extra_body={"fake": {"thinking": AGENT_REASONING}},
        )  # fmt: skip
        said = [block.model_dump(exclude_none=True) for block in first.content]
        messages.append({"role": "assistant", "content": said})
        results = [
            {"type": "tool_result", "tool_use_id": b.id, "content": weather_of(b.input)}
            for b in first.content if b.type == "tool_use"
        ]  # fmt: skip
        messages.append({"role": "user", "content": results})
        async with client.messages.stream(
            model=model, max_tokens=512, system=AGENT_SYSTEM, messages=messages, tools=tools
        ) as stream:
            final = await stream.get_final_message()
    return [first.model_dump(), final.model_dump()]
