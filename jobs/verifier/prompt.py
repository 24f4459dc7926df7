"""What the judge is asked, and how its answer is read.

The judge sees the task (the task app's `details.task` / `task_description` when it gave one,
else the conversation's first user message), the rubric, the task app's own outcome (its score
and details), and the policy's conversation as chat messages (rebuilt from its recorded calls
of any wire format by `traces.calls.conversation.transcript`, see `jobs.worker.judge_inputs`): every
message once, tool calls and tool results included, rendered as text. A conversation longer than
`max_transcript_chars` is trimmed in its middle: the first quarter of the budget is kept from
the start (the task and the first steps) and the rest from the end (the final answer).

It answers a JSON object `{"score": <0..1>, "justification": "<text>"}`, asked for with a JSON
schema (`response_format`); an answer that is not one is retried once, then is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jobs.verifier.config import VerifierConfig

SCHEMA_NAME = "evalhub_verdict"
MAX_JUSTIFICATION = 4000
HEAD_SHARE = 4  # 1/4 of the budget from the start, the rest from the end
SYSTEM_PROMPT = (
    "You are an impartial judge of an AI agent's work. You are given a task, a rubric, the "
    "task environment's own outcome and the agent's conversation. Grade the agent against the "
    'rubric. Answer only with a JSON object: {"score": a number from 0 to 1, '
    '"justification": one or two sentences}.'
)
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": SCHEMA_NAME,
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "justification": {"type": "string"},
            },
            "required": ["score", "justification"],
            "additionalProperties": False,
        },
    },
}
RETRY_NOTE = "Your answer was not valid ({reason}). Answer again with only the JSON object."


@dataclass(frozen=True)
class Verdict:
    score: float
    justification: str


class MalformedAnswer(ValueError):
    """The judge answered, but not a verdict."""


def _answer_message(response: Any) -> dict[str, Any] | None:
    if not isinstance(response, dict):
        return None
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def render(message: dict[str, Any]) -> str:
    """One message as text: `[role] content`, then its tool calls."""
    lines = [f"[{message.get('role', '?')}] {_content_text(message.get('content'))}".rstrip()]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        lines.append(f"  -> tool call {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(lines)


def _content_text(content: Any) -> str:
    """A message's content as text: a string as is, the text of a list of text parts joined,
    anything else as JSON."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        return "\n".join(str(p.get("text") or "") for p in content)
    return json.dumps(content, default=str)


def trim(text: str, budget: int) -> str:
    """`text` within `budget` characters: its start and its end, the middle replaced by a note."""
    if len(text) <= budget:
        return text
    head = budget // HEAD_SHARE
    tail = budget - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters trimmed ...]\n{text[-tail:]}"


def task_of(messages: list[dict[str, Any]], details: Any) -> str:
    if isinstance(details, dict):
        for key in ("task", "task_description", "instructions"):
            if isinstance(details.get(key), str) and details[key].strip():
                return details[key]
    for message in messages:
        if message.get("role") == "user":
            return render(message).removeprefix("[user] ")
    return "(the task was not recorded)"


def judge_messages(
    config: VerifierConfig, *, conversation: list[dict[str, Any]], outcome: dict[str, Any]
) -> list[dict[str, Any]]:
    details = outcome.get("details")
    text = "\n".join(render(m) for m in conversation) or "(no LLM call was recorded)"
    user = "\n\n".join(
        [
            f"## Task\n{trim(task_of(conversation, details), config.max_transcript_chars // 4)}",
            f"## Rubric\n{config.rubric}",
            "## The environment's outcome\n"
            + trim(json.dumps(outcome, default=str, sort_keys=True), 4000),
            f"## The agent's conversation\n{trim(text, config.max_transcript_chars)}",
        ]
    )
    return [
        {"role": "system", "content": config.judge_prompt or SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def judge_request(config: VerifierConfig, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": config.backend_model,
        "messages": messages,
        "response_format": RESPONSE_FORMAT,
        "temperature": 0,
    }


def retry_messages(messages: list[dict[str, Any]], answer: Any, reason: str) -> list[dict]:
    """The conversation again, with the malformed answer and what was wrong with it."""
    said = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    return [
        *messages,
        {"role": "assistant", "content": said[:MAX_JUSTIFICATION]},
        {"role": "user", "content": RETRY_NOTE.format(reason=reason)},
    ]


def verdict_parse(response: Any) -> Verdict:
    """The verdict in a chat completion; MalformedAnswer says what is wrong otherwise."""
    message = _answer_message(response)
    if message is None:
        raise MalformedAnswer("no message in the answer")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise MalformedAnswer("the answer has no text")
    text = content.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
    try:
        value = json.loads(text)
    except ValueError:
        raise MalformedAnswer("the answer is not JSON") from None
    if not isinstance(value, dict):
        raise MalformedAnswer("the answer is not a JSON object")
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        raise MalformedAnswer(f"score must be a number from 0 to 1, got {score!r}"[:200])
    justification = value.get("justification")
    if not isinstance(justification, str):
        raise MalformedAnswer("justification must be a string")
    return Verdict(score=float(score), justification=justification[:MAX_JUSTIFICATION])
