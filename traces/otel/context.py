"""W3C trace context: the trace id of a sample, the span id of each of its parts, and the
`traceparent` header evalhub sends with a rollout and reads on an LLM call.

Every id is derived from what the rows already hold (the job, the seed, the repeat, the attempt
number, the call's seq), so the spans exported once a sample is finished share the trace id of
the `traceparent` the task app was sent while it ran, with nothing stored for it.
"""

from __future__ import annotations

import hashlib
import re

_TRACEPARENT_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
TRACEPARENT_HEADER = "traceparent"
# Longest traceparent of version 00 (LLMCall.traceparent's length).
TRACEPARENT_LEN = 55


def _digest(*parts: object, size: int) -> int:
    data = "\0".join(str(p) for p in parts).encode()
    value = int.from_bytes(hashlib.blake2b(data, digest_size=size).digest(), "big")
    return value or 1  # all zeros is not a valid id


def sample_trace_id(job_id: str, seed: int, repeat: int) -> int:
    """The 128-bit trace id of one sample (seed, repeat) of a job."""
    return _digest("evalhub.sample", job_id, seed, repeat, size=16)


def span_id(trace_id: int, *parts: object) -> int:
    """A 64-bit span id within a trace: ("sample",), ("attempt", n), ("call", attempt, seq)..."""
    return _digest(trace_id, *parts, size=8)


def attempt_traceparent(job_id: str, seed: int, repeat: int, attempt: int) -> str:
    """What a rollout request carries: the sample's trace, its attempt's span as the parent."""
    trace_id = sample_trace_id(job_id, seed, repeat)
    return f"00-{trace_id:032x}-{span_id(trace_id, 'attempt', attempt):016x}-01"


def traceparent_parse(value: str | None) -> tuple[int, int] | None:
    """(trace id, parent span id) of a valid version-00 traceparent; None for anything else."""
    match = _TRACEPARENT_RE.match((value or "").strip().lower())
    if match is None:
        return None
    trace_id, parent = int(match[1], 16), int(match[2], 16)
    return (trace_id, parent) if trace_id and parent else None


def traceparent_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's traceparent header when it is valid (an ASGI scope's headers), else ""."""
    for name, value in headers:
        if name == b"traceparent":
            text = value.decode("latin-1")
            return text.strip().lower() if traceparent_parse(text) else ""
    return ""
