"""What a recorded chat exchange is made of: the assistant's message of a response and what
counts as its reasoning. The trace documents (API, zip) and the dashboard both read calls
through these, so they always agree.

A streamed answer is stored already assembled into one chat.completion document
(`traces.calls.usage.response_from_stream`), so a response is read the same whichever way it came.
"""

from __future__ import annotations

from typing import Any

# Where providers put reasoning: `reasoning_content` (DeepSeek, vLLM, Groq...), `reasoning`
# (OpenRouter, some vLLM versions), `reasoning_details` (structured), `thinking`.
REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def first_choice(response: Any) -> dict[str, Any]:
    choices = response.get("choices") if isinstance(response, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def assistant_message(response: Any) -> tuple[dict[str, Any] | None, str]:
    """The assistant message of a chat completion (first choice) and its finish reason."""
    choice = first_choice(response)
    message = choice.get("message")
    return (message if isinstance(message, dict) else None), str(choice.get("finish_reason") or "")


def split_think(text: str) -> tuple[str, str]:
    """(reasoning, visible text) of content that some models begin with <think>...</think>."""
    stripped = text.lstrip()
    if stripped.startswith(_THINK_OPEN) and _THINK_CLOSE in stripped:
        head, _, rest = stripped[len(_THINK_OPEN) :].partition(_THINK_CLOSE)
        return head.strip(), rest.strip()
    return "", text


def reasoning_of(message: Any) -> Any:
    """The reasoning of a message: the first of REASONING_KEYS that is set (a string, or the
    structure the provider gave), else an inline <think> block of its content, else None."""
    if not isinstance(message, dict):
        return None
    for key in REASONING_KEYS:
        value = message.get(key)
        if value not in (None, "", []):
            return value
    content = message.get("content")
    if isinstance(content, str):
        return split_think(content)[0] or None
    return None
