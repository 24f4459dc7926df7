"""What names a secret: a key whose value is one (`authorization`, `api_key`, `x-api-key`,
`password`...), and how a value masked for it is shown. The one rule for every layer:
`traces.redaction` applies it to everything that leaves the server (with the secret values it
knows), `jobs.public` to a job's configuration as people see it."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

REDACTED = "<redacted>"

_SECRET_KEY_RE = re.compile(
    r"^(x_)?(authorization|proxy_authorization|api_?keys?|.*_api_?keys?|cookie|set_cookie"
    r"|password|passwd|access_token|refresh_token|client_secret|secret_key|secret_access_key"
    r"|aws_secret_access_key|session_token|.*_security_token|private_token"
    # Headers of a service's own (`X-Custom-Auth`, `X-Auth-Token`) and `auth`, never `author`
    # nor `oauth`: a plain `token` stays shown (a logprobs item's token is data).
    r"|(.*_)?auth|(.*_)?auth_token)$"
)
# Lower-cased with "-" read as "_", every key `is_secret_key` calls secret contains one of these
# (`traces.redaction` looks for them in JSON text before walking it).
SECRET_KEY_HINTS = ("auth", "api_key", "apikey", "cookie", "passw", "access_token",
                    "refresh_token", "session_token", "security_token", "private_token",
                    "secret")  # fmt: skip


@lru_cache(maxsize=4096)  # the same few keys come back in every message of every call
def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY_RE.match(key.strip().lower().replace("-", "_")))


def value_is_set(value: Any) -> bool:
    """A secret-named key whose value is empty or a flag (`"api_key": null`) shows as it is."""
    return value not in (None, "", False, True) and not isinstance(value, int | float)


def secret_keys_masked(value: Any, *, text: Callable[[str], str] | None = None) -> Any:
    """A copy of a JSON value with what is set under every secret-named key, at any depth,
    shown as REDACTED; with `text`, every other string and every key goes through it
    (`traces.redaction.Redactor.value`: the secret values it knows). Iterative: a value nested
    deeper than Python's recursion limit is masked like any other."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, str):
            parent[slot] = item if text is None else text(item)
        elif isinstance(item, dict):
            out: dict[Any, Any] = {}
            parent[slot] = out
            for k, v in item.items():
                key = k if text is None else text(str(k))
                if is_secret_key(str(k)) and value_is_set(v):
                    out[key] = REDACTED
                else:
                    out[key] = None  # its place, in the order of the keys
                    stack.append((v, out, key))
        elif isinstance(item, list | tuple):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            stack.extend((v, items, n) for n, v in enumerate(item))
        else:
            parent[slot] = item
    return root[0]
