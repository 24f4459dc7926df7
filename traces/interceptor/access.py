"""Who a token belongs to: resolved from the database once, then trusted from memory for
EVALHUB_INTERCEPTOR_TOKEN_TTL_S (unknown tokens for a second), so a call does no query."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from django.conf import settings

from traces import selectors
from traces.interceptor.dbthreads import DbThreads
from traces.interceptor.errors import InterceptorError
from traces.tokens import token_hash

_NEGATIVE_TTL_S = 1.0
_MAX_CACHED_TOKENS = 100_000


class TokenCache:
    def __init__(self, db: DbThreads):
        self._db = db
        self._tokens: dict[str, tuple[float, selectors.AttemptAccess | None]] = {}

    async def access(self, token: str) -> selectors.AttemptAccess:
        """The attempt behind `token`; 401 for an unknown token, 410 once its attempt ended
        more than EVALHUB_INTERCEPTOR_GRACE_S ago."""
        digest = token_hash(token)
        now = time.monotonic()
        hit = self._tokens.get(digest)
        if hit is not None and hit[0] > now:
            access = hit[1]
        else:
            access = await self._db.read(selectors.attempt_access_get, token_hash=digest)
            if len(self._tokens) > _MAX_CACHED_TOKENS:
                self._tokens = {k: v for k, v in self._tokens.items() if v[0] > now}
            ttl = settings.EVALHUB_INTERCEPTOR_TOKEN_TTL_S if access else _NEGATIVE_TTL_S
            self._tokens[digest] = (now + ttl, access)
        if access is None:
            raise InterceptorError(401, "invalid_token", "Unknown interceptor token.")
        if not access.running:
            ended = access.finished_at or datetime.now(UTC)
            grace = timedelta(seconds=settings.EVALHUB_INTERCEPTOR_GRACE_S)
            if datetime.now(UTC) > ended + grace:
                raise InterceptorError(
                    410, "rollout_ended", "This rollout has ended; its inference URL is closed."
                )
        return access
