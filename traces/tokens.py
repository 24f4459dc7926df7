"""Interceptor tokens: the unguessable secret in a rollout attempt's inference URL.

Only the token's SHA-256 is stored (`RolloutAttempt.token_hash`); the token itself lives in the
URL handed to the task app and nowhere else.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings


def token_new() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def inference_url(token: str) -> str:
    """The OpenAI base URL a task app is told to use; it appends `/chat/completions`."""
    return f"{settings.EVALHUB_PUBLIC_URL}/api/interceptor/v1/{token}"
