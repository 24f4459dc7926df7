"""Reading configuration from the environment.

Every setting evalhub has is read through these helpers, in `evalhub/settings.py` only.
A malformed value stops the process at start with a message naming the variable, rather
than being silently replaced by a default.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return value.strip()


def envstr(name: str, default: str = "") -> str:
    value = _raw(name)
    return default if value is None or value == "" else value


def envbool(name: str, default: bool = False) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no)")


def envint(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    _check_range(name, number, minimum, maximum)
    return number


def envfloat(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    _check_range(name, number, minimum, maximum)
    return number


def envurl(name: str, default: str = "", *, schemes: tuple[str, ...] = ("http", "https")) -> str:
    value = envstr(name, default)
    if not value:
        return value
    parsed = urlparse(value)
    if parsed.scheme not in schemes or not parsed.netloc:
        allowed = ", ".join(f"{s}://" for s in schemes)
        raise ImproperlyConfigured(f"{name}={value!r} is not a URL starting with {allowed}")
    return value.rstrip("/")


def envjson(name: str, default: Any) -> Any:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None


def _check_range(name: str, number: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}")
