"""Per-rollout limits (the job's `rollout_limits`: `max_llm_calls`, `max_tokens`,
`max_cost_usd`): what one rollout attempt may spend, however many web processes serve its calls.

Checked before forwarding. `max_llm_calls` is never exceeded: a call is let through by one
conditional UPDATE of the attempt's count in the database (`services.attempt_call_admit`), which
every process shares. Tokens and cost are counted when the writer has read a call's usage,
exactly as recorded: a call arriving while an earlier call of the same attempt, in this
process, has answered but is not yet counted waits for that count (the writer takes
milliseconds), then the attempt's spending as recorded by every process is read. So a rollout
that calls one at a time stops exactly at the first call past a token or cost limit, whichever
process serves it. The overshoot is at most the calls in flight when the limit was crossed
(and those another process has answered and not yet saved): each still reaches the provider
and is billed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import NoReturn

from traces.calls import recording as services
from traces.calls.recording import CallRecord
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.models import ROLLOUT_LIMIT_EXCEEDED
from traces.results import selectors, totals

# Longest a call waits for the count of its attempt's previous calls.
_COUNT_WAIT_S = 2.0


@dataclass
class _AttemptSpent(totals.Spent):
    """An attempt's spending as this process counts it."""

    pending: int = 0  # answered calls the writer has not counted yet


class RolloutLimits:
    def __init__(self, db: DbThreads):
        self._db = db
        self._spent: dict[int, _AttemptSpent] = {}
        self._lock = threading.Lock()

    async def track(self, access: selectors.AttemptAccess) -> None:
        if access.rollout_limits and access.attempt_id not in self._spent:
            self._spent.setdefault(access.attempt_id, _AttemptSpent())

    async def check(self, access: selectors.AttemptAccess) -> None:
        """Raise 429 rollout_limit_exceeded once the attempt reached a limit; else count the
        call about to be forwarded."""
        limits = access.rollout_limits
        spent = self._spent.get(access.attempt_id)
        if not limits or spent is None:
            return
        if limits.get("max_tokens") is not None or limits.get("max_cost_usd") is not None:
            deadline = time.monotonic() + _COUNT_WAIT_S
            while spent.pending and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            # Every process's recorded calls; ours may be counted here and not saved yet.
            recorded = await self._db.read(totals.attempt_spent, attempt_id=access.attempt_id)
            with self._lock:
                spent.at_least(recorded)
            reached = _usage_reached(limits, spent)
            if reached:
                _refuse(limits, *reached)
        max_calls = limits.get("max_llm_calls")
        if max_calls is not None and not await self._db.write(
            services.attempt_call_admit, attempt_id=access.attempt_id, max_calls=max_calls
        ):
            _refuse(limits, "max_llm_calls", f"{max_calls} calls")

    def submitted(self, record: CallRecord) -> None:
        """A forwarded call's record goes to the writer: its count is pending."""
        spent = self._spent.get(record.attempt_id)
        if spent is not None and record.forwarded:
            with self._lock:
                spent.pending += 1

    def count(self, records: list[CallRecord], calls) -> None:
        """Writer thread: add the usage of the calls about to be saved."""
        with self._lock:
            for call in calls:
                spent = self._spent.get(call.attempt_id)
                if spent is not None:
                    spent.add(call)
            for record in records:
                spent = self._spent.get(record.attempt_id)
                if spent is not None and record.forwarded:
                    spent.pending -= 1


def _usage_reached(limits: dict, spent: totals.Spent) -> tuple[str, str] | None:
    """(the first usage limit reached, what was used of it), or None."""
    if limits.get("max_tokens") is not None and spent.tokens >= limits["max_tokens"]:
        return "max_tokens", f"{spent.tokens} tokens"
    if limits.get("max_cost_usd") is not None and spent.cost >= limits["max_cost_usd"]:
        return "max_cost_usd", f"${spent.cost:.6f}"
    return None


def _refuse(limits: dict, name: str, used: str) -> NoReturn:
    raise InterceptorError(
        429,
        ROLLOUT_LIMIT_EXCEEDED,
        f"This rollout reached its limit {name}: {used} of {limits[name]:g}.",
        refusal=name,
    )
