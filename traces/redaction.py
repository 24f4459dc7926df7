"""Scrubbing secrets out of anything that goes into a trace, a manifest or a zip.

Requests and responses are stored as the interceptor recorded them, and task apps are user code
that may echo whatever they were given (headers, the inference URL with its token). So every
JSON value is scrubbed on the way out, three ways:

- values under secret-looking keys (`authorization`, `api_key`, `x-api-key`, ...) are replaced;
- interceptor URL tokens (`/api/interceptor/v1/<token>`) and `Bearer <value>` are masked in
  every string;
- the known secret values of the job and the server (its task app key, provider keys) are
  masked wherever they appear, under any key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from django.conf import settings

REDACTED = "<redacted>"

_SECRET_KEY_RE = re.compile(
    r"^(x_)?(authorization|proxy_authorization|api_?keys?|.*_api_?keys?|cookie|set_cookie"
    r"|password|passwd|access_token|refresh_token|client_secret|secret_key|secret_access_key"
    r"|aws_secret_access_key|session_token)$"
)
# The token is one path segment after /interceptor/v1/; keep the rest of the URL readable.
_INTERCEPTOR_TOKEN_RE = re.compile(r"(/interceptor/v1/)[^/\s\"'?#&<>]+")
_BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{6,}")
# Shorter "secrets" would mask ordinary words; real keys are long.
_MIN_SECRET_LEN = 8


@lru_cache(maxsize=4096)  # the same few keys come back in every message of every call
def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY_RE.match(key.strip().lower().replace("-", "_")))


def server_secrets() -> list[str]:
    """Secret values the server holds: provider keys (also inside EVALHUB_PROVIDERS)."""
    found = [settings.OPENAI_API_KEY or ""]

    def collect(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                collect(v, str(k))
        elif isinstance(value, list):
            for v in value:
                collect(v, key)
        elif isinstance(value, str) and key and is_secret_key(key):
            found.append(value)

    collect(getattr(settings, "EVALHUB_PROVIDERS", {}) or {})
    return [s for s in found if len(s) >= _MIN_SECRET_LEN]


class Redactor:
    """Scrubs JSON values; built once per job with the secret values to look for."""

    def __init__(self, secrets: Iterable[str] = ()):
        # Longest first, so a secret that contains another is masked whole.
        self.secrets = sorted(
            {s for s in secrets if s and len(s) >= _MIN_SECRET_LEN}, key=len, reverse=True
        )

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        if "/interceptor/v1/" in value:
            value = _INTERCEPTOR_TOKEN_RE.sub(rf"\g<1>{REDACTED}", value)
        if "earer" in value:
            value = _BEARER_RE.sub(rf"\g<1>{REDACTED}", value)
        return value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                self.text(str(k)): (
                    REDACTED if is_secret_key(str(k)) and value_is_set(v) else self.value(v)
                )
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def value_is_set(value: Any) -> bool:
    """A secret-named key whose value is empty or a flag (`"api_key": null`) shows as it is."""
    return value not in (None, "", False, True) and not isinstance(value, int | float)
