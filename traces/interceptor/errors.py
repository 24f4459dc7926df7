"""Answers of the interceptor's own (not the provider's), in OpenAI's error shape."""

from __future__ import annotations

import json
from typing import Any

from traces.interceptor.clients import is_timeout


class InterceptorError(Exception):
    """A refusal or failure the interceptor answers itself: status, type and message; for a
    refusal of the job's budget or a rollout limit, which (`traces.models.Refusal`), recorded
    with the call."""

    def __init__(self, status: int, type_: str, message: str, *, refusal: str = ""):
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.refusal = refusal

    def body(self, *, anthropic: bool = False) -> bytes:
        return error_body(self.message, self.type, anthropic=anthropic)


def error_body(message: str, type_: str, code: Any = None, *, anthropic: bool = False) -> bytes:
    """OpenAI's error shape, or Anthropic's (`{"type": "error", "error": {...}}`) for the
    Messages routes, so each SDK shows the message."""
    if anthropic:
        return json.dumps({"type": "error", "error": {"type": type_, "message": message}}).encode()
    error = {"message": message, "type": type_, "param": None, "code": code or type_}
    return json.dumps({"error": error}).encode()


def is_openai_error(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


def upstream_failure(exc: BaseException, *, answering: bool = False) -> InterceptorError:
    """The one mapping of a failure to reach or read the provider: a timeout is 504, anything
    else 502. `answering`: the provider had begun its answer (headers came) when it failed."""
    timeout = is_timeout(exc)
    if answering:
        type_ = "upstream_timeout" if timeout else "upstream_error"
        message = f"The provider's answer {'stalled' if timeout else 'was cut off'}."
    else:
        type_ = "upstream_timeout" if timeout else "upstream_unreachable"
        message = (
            f"The provider {'timed out' if timeout else 'is unreachable'}: {type(exc).__name__}"
        )
    return InterceptorError(504 if timeout else 502, type_, message)
