"""Interceptor tokens: one per rollout attempt, in the inference URL handed to the task app.

The worker makes a token for each attempt and stores only its SHA-256 on the `RolloutAttempt`
(`token_hash`); the interceptor hashes the token found in the URL path to find the attempt.
Both sides import these three functions, so the URL shape and the hash live in one place.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from django.conf import settings

INTERCEPTOR_PATH = "/api/interceptor/v1/"
# On the interceptor root's answer: when this web process started (Unix seconds). A rollout that
# failed across a restart of the interceptor failed because of us, even if it is back now.
STARTED_HEADER = "x-evalhub-interceptor-started"
# Tokens carry a prefix so the redactor finds them anywhere (a task app may echo one in any
# text, not only in a URL): "ehi_" + 43 URL-safe characters.
TOKEN_PREFIX = "ehi_"
TOKEN_RE = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]{43}")


def token_new() -> str:
    """An unguessable URL-safe token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What is stored and looked up: the SHA-256 hex digest of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def inference_url(token: str) -> str:
    """The OpenAI base URL a task app is told to use for this attempt; clients append
    `/chat/completions` to it."""
    return f"{settings.EVALHUB_PUBLIC_URL}{INTERCEPTOR_PATH}{token}"


def interceptor_root_url() -> str:
    """The interceptor's root: any answer from it (a 404 without a token) shows it is up."""
    return f"{settings.EVALHUB_PUBLIC_URL}{INTERCEPTOR_PATH}"
