"""Job budgets (`max_cost_usd`, `max_tokens`): checked before each call against the job's
spent totals, kept in memory per process: read from the database when the process first sees
the job, increased by every call this process records, re-read every
EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S (calls other processes served show up then)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.models import BUDGET_EXCEEDED, Refusal
from traces.results import selectors, totals

log = logging.getLogger(__name__)


@dataclass
class _JobSpent(totals.Spent):
    """A job's spending as this process counts it, and when it was last read again."""

    refreshed_at: float = 0.0
    refreshing: bool = False


class Budgets:
    def __init__(self, db: DbThreads):
        self._db = db
        self._spent: dict[str, _JobSpent] = {}
        self._lock = threading.Lock()

    async def track(self, access: selectors.AttemptAccess) -> None:
        """Start keeping the totals of the access's job, if it has a budget."""
        if access.has_budget and access.job_id not in self._spent:
            spent = await self._db.read(totals.job_spent, job_id=access.job_id)
            self._spent[access.job_id] = _JobSpent(spent.tokens, spent.cost, time.monotonic())

    def check(self, access: selectors.AttemptAccess) -> None:
        """Raise 429 budget_exceeded once the job's budget is spent."""
        spent = self._spent.get(access.job_id)
        if spent is None:
            return
        if (
            not spent.refreshing
            and time.monotonic() - spent.refreshed_at
            > settings.EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S
        ):
            spent.refreshing = True
            asyncio.get_running_loop().create_task(self._refresh(access.job_id))
        if access.max_cost_usd is not None and spent.cost >= access.max_cost_usd:
            raise InterceptorError(
                429,
                BUDGET_EXCEEDED,
                f"The job's budget is spent: ${spent.cost:.6f} of max_cost_usd "
                f"${access.max_cost_usd:g}.",
                refusal=Refusal.BUDGET,
            )
        if access.max_tokens is not None and spent.tokens >= access.max_tokens:
            raise InterceptorError(
                429,
                BUDGET_EXCEEDED,
                f"The job's budget is spent: {spent.tokens} of max_tokens {access.max_tokens}.",
                refusal=Refusal.BUDGET,
            )

    async def _refresh(self, job_id: str) -> None:
        try:
            spent = await self._db.read(totals.job_spent, job_id=job_id)
            fresh = _JobSpent(spent.tokens, spent.cost, time.monotonic())
            with self._lock:
                # The database may lack calls counted here: the writer saves them after.
                local = self._spent.get(job_id)
                if local is not None:
                    fresh.at_least(local)
                self._spent[job_id] = fresh
        except Exception:
            log.exception("refreshing the spent totals of job %s failed", job_id)
            spent = self._spent.get(job_id)
            if spent:
                spent.refreshing = False

    def count(self, records, calls) -> None:
        """Writer thread: add the calls about to be recorded to the in-memory totals."""
        job_of = {record.attempt_id: record.job_id for record in records}
        with self._lock:
            for call in calls:
                spent = self._spent.get(job_of[call.attempt_id])
                if spent is not None:
                    spent.add(call)
