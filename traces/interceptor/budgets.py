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

from traces import selectors, totals
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.models import BUDGET_EXCEEDED

log = logging.getLogger(__name__)


@dataclass
class _Spent:
    cost: float
    tokens: int
    refreshed_at: float
    refreshing: bool = False


class Budgets:
    def __init__(self, db: DbThreads):
        self._db = db
        self._spent: dict[str, _Spent] = {}
        self._lock = threading.Lock()

    async def track(self, access: selectors.AttemptAccess) -> None:
        """Start keeping the totals of the access's job, if it has a budget."""
        if access.has_budget and access.job_id not in self._spent:
            cost, tokens = await self._db.read(totals.job_spent, job_id=access.job_id)
            self._spent[access.job_id] = _Spent(cost, tokens, time.monotonic())

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
            )
        if access.max_tokens is not None and spent.tokens >= access.max_tokens:
            raise InterceptorError(
                429,
                BUDGET_EXCEEDED,
                f"The job's budget is spent: {spent.tokens} of max_tokens {access.max_tokens}.",
            )

    async def _refresh(self, job_id: str) -> None:
        try:
            cost, tokens = await self._db.read(totals.job_spent, job_id=job_id)
            with self._lock:
                # Spending only grows. The database may not have this process's newest calls
                # yet (the writer saves them after counting them here): never count back down.
                local = self._spent.get(job_id)
                if local is not None:
                    cost, tokens = max(cost, local.cost), max(tokens, local.tokens)
                self._spent[job_id] = _Spent(cost, tokens, time.monotonic())
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
                    spent.cost += call.cost_usd or 0.0
                    spent.tokens += call.total_tokens or 0
