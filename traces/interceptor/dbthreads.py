"""The interceptor's own database threads: the event loop never runs a query itself."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from django.db import DatabaseError, connection

from traces.interceptor.errors import InterceptorError

log = logging.getLogger(__name__)


class DbThreads:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="interceptor-db")

    async def read(self, fn, /, **kwargs):
        """Run a read in one of our threads. They keep their connection open (reopening costs
        more than the read); one that fails is closed and the read tried once more."""

        def run():
            try:
                return fn(**kwargs)
            except DatabaseError:
                connection.close()
                return fn(**kwargs)

        return await self._in_thread(run)

    async def write(self, fn, /, **kwargs):
        """Run a short write (one statement, autocommit) in one of our threads, once: a
        connection that fails is closed for the next one."""

        def run():
            try:
                return fn(**kwargs)
            except DatabaseError:
                connection.close()
                raise

        return await self._in_thread(run)

    async def _in_thread(self, run):
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, run)
        except DatabaseError as exc:
            log.exception("the interceptor could not reach the database")
            raise InterceptorError(
                503, "service_unavailable", "The interceptor cannot reach its database."
            ) from exc
