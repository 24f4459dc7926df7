"""The fake provider as evalhub's verifier judge: a request whose `response_format` is the
`evalhub_verdict` JSON schema gets a verdict computed from the conversation it is shown."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from evalhub.fakeprovider.chat import answer_model, completion_id

JUDGE_SCHEMA = "evalhub_verdict"
JUDGE_USAGE = {"prompt_tokens": 900, "completion_tokens": 60}
JUDGE_DELAY_RE = re.compile(r"fake-judge:delay=([0-9.]+)")


def is_judge(body: dict[str, Any]) -> bool:
    rf = body.get("response_format")
    return isinstance(rf, dict) and (rf.get("json_schema") or {}).get("name") == JUDGE_SCHEMA


def judge_text(body: dict[str, Any]) -> str:
    return "\n".join(
        m["content"] for m in body.get("messages") or [] if isinstance(m.get("content"), str)
    )


def judge_score(body: dict[str, Any]) -> float:
    """The fake judge's score: a function of the first conversation it is shown (the judge's
    first user message), in [0, 1] with two decimals."""
    first = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    return int(hashlib.sha256(first.encode()).hexdigest()[:8], 16) % 101 / 100


def judge_completion(body: dict[str, Any]) -> dict[str, Any]:
    text = judge_text(body)
    retried = "Your answer was not valid" in text
    if "fake-judge:malformed" in text and not ("malformed-once" in text and retried):
        content = "The agent did well, I would say 8 out of 10."
    else:
        score = judge_score(body)
        content = json.dumps({"score": score, "justification": f"Fake verdict {score:.2f}."})
    prompt, completion_tokens = JUDGE_USAGE["prompt_tokens"], JUDGE_USAGE["completion_tokens"]
    return {
        "id": completion_id(body),
        "object": "chat.completion",
        "created": 1700000000,
        "model": answer_model(body),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }
