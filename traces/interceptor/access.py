"""Who a token belongs to: resolved from the database once, then trusted from memory for
EVALHUB_INTERCEPTOR_TOKEN_TTL_S (unknown tokens for a second), so a call does no query.

Revocation, by push: the moment a worker knows an attempt is over (the task app's answer
arrived, it failed or timed out, the rollout was aborted or lost, the job closed it) it
publishes the attempt's id (`evalhub.revocations`: Redis pub/sub with a Redis broker, Unix
datagrams on one machine otherwise), before it writes the attempt's row. Every web process
subscribes and adds the ids to its ended set as they arrive, so an ended attempt's URL is
refused (410) by every process within milliseconds (tests/traces/test_revocation_push.py
measures it), with no query added to a call.

The safety net, by poll: each web process keeps the ids of the running attempts it serves and
asks the database which of them have ended, in one query every
EVALHUB_INTERCEPTOR_REVOCATION_POLL_S (0.5 s), in the background: an end the push missed (its
channel was down) is refused within that time, on any database and broker. With
EVALHUB_INTERCEPTOR_GRACE_S > 0 a URL keeps working that long after the attempt ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import islice

from django.conf import settings

from evalhub.revocations import Subscriber
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.results import selectors
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
        # Attempts known to have ended (pushed, or found by the poll): id -> when they ended,
        # oldest first.
        self._ended: dict[int, datetime] = {}
        self._poller: asyncio.Task | None = None
        self._pushed = Subscriber(self.ended)

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
        access = self._as_known(access)
        if access.running and access.kind == "policy":
            self._watch(access.attempt_id, now)
        _refuse_if_closed(access)
        return access

    def still_open(self, access: selectors.AttemptAccess) -> None:
        """410 if the attempt's end arrived since `access` was read: checked again just
        before the call is sent, so an end pushed while the call waited (its row written
        ahead, a rate limit) keeps it from the provider."""
        _refuse_if_closed(self._as_known(access))

    def _as_known(self, access: selectors.AttemptAccess) -> selectors.AttemptAccess:
        """`access` with the end this process knows of (a policy attempt's only)."""
        if access.running and access.kind == "policy":
            ended_at = self._ended.get(access.attempt_id)
            if ended_at is not None:
                return replace(access, running=False, finished_at=ended_at)
        return access

    def listen(self) -> None:
        """Take the ends workers push from now on (call it on the process's event loop)."""
        self._pushed.start()

    def close(self) -> None:
        self._pushed.close()
        if self._poller is not None:
            self._poller.cancel()

    def ended(self, attempt_ids: Iterable[int], at: datetime | None = None) -> None:
        """These attempts have ended: their URLs close in this process now."""
        at = at or datetime.now(UTC)
        for attempt_id in attempt_ids:
            self._ended.setdefault(attempt_id, at)
            self._watched.pop(attempt_id, None)
        if len(self._ended) > _MAX_CACHED_TOKENS:
            # The oldest are long past any grace and their tokens re-read as ended anyway.
            for attempt_id in list(islice(self._ended, len(self._ended) // 2)):
                del self._ended[attempt_id]

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
            self.ended([attempt_id], finished_at)


def _refuse_if_closed(access: selectors.AttemptAccess) -> None:
    """410 once the attempt ended more than EVALHUB_INTERCEPTOR_GRACE_S ago."""
    if access.running:
        return
    ended = access.finished_at or datetime.now(UTC)
    grace = timedelta(seconds=settings.EVALHUB_INTERCEPTOR_GRACE_S)
    if datetime.now(UTC) >= ended + grace:
        raise InterceptorError(
            410, "rollout_ended", "This rollout has ended; its inference URL is closed."
        )
