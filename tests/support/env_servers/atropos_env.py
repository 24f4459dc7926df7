"""An Atropos environment (a `BaseEnv` subclass) with a tool-using agent loop, served in the
tests by `evalhub-atropos tests.support.env_servers.atropos_env:WeatherEnv`.

Items are cities, in order; the model is asked for the weather and given a `get_weather` tool.
The reward is 1.0 when it asked for the item's city, else 0.25 (the fake provider always asks
for Paris). Its tokenizer is whatever `tokenizer_name` names: the tests build one locally.
"""

from __future__ import annotations

import json

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataItem

CITIES = ["Paris", "Rome", "Paris", "Oslo"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city: str, unit: str = "C") -> dict:
    return {"city": city, "temperature": 21 if city == "Paris" else 12, "unit": unit}


class WeatherEnv(BaseEnv):
    name = "weather"

    @classmethod
    def config_init(cls):
        return BaseEnvConfig(group_size=1, use_wandb=False, tokenizer_name="unset"), []

    async def setup(self):
        self.next_index = 0

    async def get_next_item(self):
        city = CITIES[self.next_index % len(CITIES)]
        self.next_index += 1
        return city

    async def evaluate(self, *args, **kwargs):
        return None

    async def collect_trajectory(self, item):
        messages = [
            {"role": "system", "content": "Answer with the tools you have."},
            {"role": "user", "content": f"What is the weather in {item}?"},
        ]
        first = (await self.server.chat_completion(messages=messages, tools=TOOLS)).choices[0]
        asked = None
        assistant = {
            "role": "assistant",
            "content": first.message.content,
            "reasoning_content": getattr(first.message, "reasoning_content", None),
            "tool_calls": [c.model_dump() for c in first.message.tool_calls or []],
        }
        messages.append(assistant)
        for call in first.message.tool_calls or []:
            arguments = json.loads(call.function.arguments)
            asked = arguments.get("city")
            result = get_weather(**arguments)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
        final = await self.server.chat_completion(
            messages=messages, tools=TOOLS, tool_choice="none"
        )
        messages.append({"role": "assistant", "content": final.choices[0].message.content})
        tokens = self.tokenizer(" ".join(str(m.get("content") or "") for m in messages))[
            "input_ids"
        ]
        scored = ScoredDataItem(
            tokens=tokens, masks=[-100] * len(tokens), scores=1.0 if asked == item else 0.25,
            messages=messages,
        )  # fmt: skip
        return scored, []
