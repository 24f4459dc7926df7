"""Who a token belongs to: resolved from the database once, then trusted from memory for
EVALHUB_INTERCEPTOR_TOKEN_TTL_S (unknown tokens for a second), so a call does no query.

Revocation: a worker ending an attempt (finished, timed out, cancelled) only writes the
attempt's row. Each web process keeps the ids of the running attempts it serves and asks the
database which of them have ended, in one query every EVALHUB_INTERCEPTOR_REVOCATION_POLL_S
(0.5 s), in the background: an ended attempt's URL is refused (410) by every process within
that time, on any database and broker, with no query added to a call. With
EVALHUB_INTERCEPTOR_GRACE_S > 0 it keeps working that long after the attempt ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.conf import settings

from traces import selectors
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.tokens import token_hash

log = logging.getLogger(__name__)

_NEGATIVE_TTL_S = 1.0
_MAX_CACHED_TOKENS = 100_000
# An attempt no call has used for this long is no longer watched (its token, if it comes
# back, is read from the database again).
_WATCH_IDLE_S = 600.0


class TokenCache:
    def __init__(self, db: DbThreads):
        self._db = db
        self._tokens: dict[str, tuple[float, selectors.AttemptAccess | None]] = {}
        # Running attempts this process serves: id -> when a call last used it.
        self._watched: dict[int, float] = {}
        # Attempts the poll found ended: id -> when they ended.
        self._ended: dict[int, datetime] = {}
        self._poller: asyncio.Task | None = None

    async def access(self, token: str) -> selectors.AttemptAccess:
        """The attempt behind `token`; 401 for an unknown token, 410 once its attempt ended
        more than EVALHUB_INTERCEPTOR_GRACE_S ago."""
        now = time.monotonic()
        hit = self._tokens.get(token)
        if hit is not None and hit[0] > now:
            access = hit[1]
        else:
            access = await self._db.read(selectors.attempt_access_get, token_hash=token_hash(token))
            if len(self._tokens) > _MAX_CACHED_TOKENS:
                self._tokens = {k: v for k, v in self._tokens.items() if v[0] > now}
            ttl = settings.EVALHUB_INTERCEPTOR_TOKEN_TTL_S if access else _NEGATIVE_TTL_S
            self._tokens[token] = (now + ttl, access)
        if access is None:
            raise InterceptorError(401, "invalid_token", "Unknown interceptor token.")
        # A judge's token (jobs/verifier/) rides on the judged attempt, long ended: it is open
        # while its judgement runs (read with the token), never revoked by the attempt's end.
        if access.running and access.kind == "policy":
            ended_at = self._ended.get(access.attempt_id)
            if ended_at is not None:
                access = replace(access, running=False, finished_at=ended_at)
            else:
                self._watch(access.attempt_id, now)
        if not access.running:
            ended = access.finished_at or datetime.now(UTC)
            grace = timedelta(seconds=settings.EVALHUB_INTERCEPTOR_GRACE_S)
            if datetime.now(UTC) >= ended + grace:
                raise InterceptorError(
                    410, "rollout_ended", "This rollout has ended; its inference URL is closed."
                )
        return access

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()

    def _watch(self, attempt_id: int, now: float) -> None:
        self._watched[attempt_id] = now
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def _poll_forever(self) -> None:
        while self._watched:
            await asyncio.sleep(settings.EVALHUB_INTERCEPTOR_REVOCATION_POLL_S)
            try:
                await self.poll()
            except Exception:  # the next poll tries again; a call is never failed by this
                log.exception("reading which attempts ended failed")

    async def poll(self) -> None:
        """Ask the database which watched attempts have ended (one query)."""
        now = time.monotonic()
        self._watched = {a: t for a, t in self._watched.items() if now - t < _WATCH_IDLE_S}
        ids = list(self._watched)
        if not ids:
            return
        ended = await self._db.read(selectors.attempts_ended, attempt_ids=ids)
        for attempt_id, finished_at in ended.items():
            self._ended[attempt_id] = finished_at or datetime.now(UTC)
            self._watched.pop(attempt_id, None)
        if len(self._ended) > _MAX_CACHED_TOKENS:
            # The oldest are long past any grace and their tokens re-read as ended anyway.
            for attempt_id in sorted(self._ended, key=self._ended.get)[: len(self._ended) // 2]:
                del self._ended[attempt_id]
