"""Scrubbing secrets out of everything that leaves the server: API answers, trace documents,
the zip, dashboard pages and log lines: what a secret is, by its key (`evalhub.secretkeys`, the
rule every layer reads) and by its value.

Requests and responses are stored as the interceptor recorded them, and task apps are user code
that may echo whatever they were given (headers, the inference URL with its token). So every
value is scrubbed on the way out, three ways:

- values under secret-looking keys (`authorization`, `api_key`, `x-api-key`, ...) are replaced;
- interceptor tokens (wherever they appear, in a URL or not) and `Bearer <value>` are masked in
  every string;
- the known secret values of the server (every configured provider's key) and of the job (its
  task app key, the credentials in its task app's URL) are masked wherever they appear, under
  any key.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import orjson
from django.conf import settings

from evalhub import crypto
from evalhub.secretkeys import (
    REDACTED,
    SECRET_KEY_HINTS,
    is_secret_key,
    secret_keys_masked,
    value_is_set,
)
from traces.tokens import INTERCEPTOR_PATH, TOKEN_PREFIX, TOKEN_RE

if TYPE_CHECKING:  # no model import at run time: logging loads this before the apps
    from jobs.models import EvalJob

# A token is one path segment after /interceptor/v1/; keep the rest of the URL readable.
_INTERCEPTOR_SEGMENT_RE = re.compile(r"(" + re.escape(INTERCEPTOR_PATH) + r")[^/\s\"'?#&<>]+")
_BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{6,}")
# Shorter "secrets" would mask ordinary words; real keys are long.
_MIN_SECRET_LEN = 8
# Strings up to this length are remembered scrubbed, up to this many per redactor.
_SHORT_TEXT, _SHORT_TEXTS = 64, 4096


def server_secrets() -> list[str]:
    """Secret values the server holds: the key of every configured provider (read from the
    variables `EVALHUB_PROVIDERS` names, see settings.EVALHUB_UPSTREAMS) and S3 credentials."""
    found = [upstream.get("api_key") or "" for upstream in settings.EVALHUB_UPSTREAMS.values()]
    found.append(getattr(settings, "AWS_SECRET_ACCESS_KEY", "") or "")
    found.append(getattr(settings, "EVALHUB_METRICS_TOKEN", "") or "")
    return [s for s in found if len(s) >= _MIN_SECRET_LEN]


class Redactor:
    """Scrubs text and JSON values, knowing the secret values to look for."""

    def __init__(self, secrets: Iterable[str] = ()):
        # Longest first, so a secret that contains another is masked whole.
        self.secrets = sorted(
            {s for s in secrets if s and len(s) >= _MIN_SECRET_LEN}, key=len, reverse=True
        )
        self._secret_bytes = [(s.encode(), REDACTED.encode()) for s in self.secrets]
        # Short strings come back again and again (keys, model names, statuses): scrubbed once.
        self._short: dict[str, str] = {}

    def raw(self, data: bytes) -> bytes:
        """The bytes with every known secret value masked (a provider's answer on its way to
        the caller: only the values, so the content is otherwise relayed as it came)."""
        for secret, mask in self._secret_bytes:
            if secret in data:
                data = data.replace(secret, mask)
        return data

    def text(self, value: str) -> str:
        if len(value) > _SHORT_TEXT:
            return self._text(value)
        scrubbed = self._short.get(value)
        if scrubbed is None:
            if len(self._short) >= _SHORT_TEXTS:
                self._short.clear()
            scrubbed = self._short[value] = self._text(value)
        return scrubbed

    def _text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        if INTERCEPTOR_PATH in value:
            value = _INTERCEPTOR_SEGMENT_RE.sub(rf"\g<1>{REDACTED}", value)
        if TOKEN_PREFIX in value:
            value = TOKEN_RE.sub(REDACTED, value)
        if "earer" in value.lower():  # in any case: "BEARER <token>" too
            value = _BEARER_RE.sub(rf"\g<1>{REDACTED}", value)
        return value

    def value(self, value: Any) -> Any:
        """A copy of a JSON value with every secret masked: under a secret-named key, and
        every known secret, token or bearer in its strings and keys."""
        return secret_keys_masked(value, text=self.text)


# Lower-cased, every string `Redactor.text` changes contains one of these or a known secret.
_TEXT_HINTS = (INTERCEPTOR_PATH, TOKEN_PREFIX, "earer")
# Values `Redactor.value` keeps as they are, or scrubs as text.
_ATOMS = frozenset((str, int, float, bool, type(None)))
# A flagged dict's dicts of up to this many items are walked without being tested first.
_WALKED_WHOLE = 4
# Deeper parts are walked whole (and iteratively) by `Redactor.value`.
_MAX_SELECTIVE_DEPTH = 8


class JsonScrubber:
    """`Redactor.value` for big JSON values that mostly hold nothing to redact (the trace
    documents of the zip: logprobs, tool schemas, task apps' traces): a part is kept as it is,
    unwalked, when its JSON text shows nothing the redactor would change. Exact, not a guess:
    the same value as `redactor.value`, only sooner."""

    def __init__(self, redactor: Redactor):
        self.redactor = redactor
        # Known secrets as they appear in JSON text (escaped by json or orjson) and unescaped.
        forms = {
            form for s in redactor.secrets for form in (s, json.dumps(s)[1:-1], _orjson_str(s))
        }
        secrets = sorted({_lowered(form) for form in forms})
        self._hints = (*_TEXT_HINTS, *SECRET_KEY_HINTS, *secrets)

    def may_change(self, text: str) -> bool:
        """Could `redactor.value` change the value this JSON text encodes (as json, orjson or
        PostgreSQL write it)? A superset: False only when no key looks secret and no string
        holds a known secret, an interceptor token or URL, or a bearer."""
        if "\\u" in text:  # escaped characters (json's non-ASCII): look at them unescaped
            try:
                text = orjson.dumps(orjson.loads(text)).decode()
            except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # NaN, huge integers
                return True
        return any(map(_lowered(text).__contains__, self._hints))

    def value(self, value: Any, depth: int = 0) -> Any:
        """`redactor.value(value)`, without walking the parts `may_change` clears."""
        if type(value) in _ATOMS:
            return self.redactor.text(value) if type(value) is str else value
        if not isinstance(value, dict | list):  # a tuple to walk, or anything else
            return self.redactor.value(value)
        try:
            text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
        except (orjson.JSONEncodeError, TypeError):
            return self.redactor.value(value)
        return self.walk(value, depth) if self.may_change(text) else value

    def walk(self, value: Any, depth: int = 0) -> Any:
        """`redactor.value(value)` for a value `may_change` did not clear: its own keys and
        strings are scrubbed, its parts tested one by one."""
        if depth >= _MAX_SELECTIVE_DEPTH or not isinstance(value, dict | list):
            return self.redactor.value(value)
        if isinstance(value, list):
            return [self.value(v, depth + 1) for v in value]
        out: dict[str, Any] = {}
        text = self.redactor.text
        for key, item in value.items():
            key = key if type(key) is str else str(key)
            if type(item) in _ATOMS:  # the common case, inline (only a string is ever set)
                if type(item) is str:
                    item = REDACTED if item and is_secret_key(key) else text(item)
                out[text(key)] = item
            elif is_secret_key(key) and value_is_set(item):
                out[text(key)] = REDACTED
            elif type(item) is dict and len(item) <= _WALKED_WHOLE:
                out[text(key)] = self.walk(item, depth + 1)  # sooner walked than tested
            else:
                out[text(key)] = self.value(item, depth + 1)
        return out


def _lowered(text: str) -> str:
    """What the hints are looked for in: `is_secret_key` reads "-" as "_"."""
    return text.lower().replace("-", "_")


def _orjson_str(text: str) -> str:
    return orjson.dumps(text).decode()[1:-1]


@cache
def server_redactor() -> Redactor:
    """The redactor for what concerns no job in particular (log lines); settings do not change
    while a process runs."""
    return Redactor(server_secrets())


def job_task_app_key(job: EvalJob) -> str | None:
    """The job's task app key in plain text, or None (none set, or unreadable after a
    SECRET_KEY rotation: then it cannot leak from here either)."""
    if not job.has_task_app_api_key:
        return None
    try:
        return crypto.decrypt(job.task_app_api_key_encrypted)
    except ValueError:
        return None


def url_credentials(url: str) -> list[str]:
    """The secrets a URL carries: its `user:pass@` part, as written and decoded, and the
    password alone."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    userinfo = parts.netloc.rpartition("@")[0]
    if not userinfo:
        return []
    password = parts.password or ""
    return [userinfo, unquote(userinfo), password, unquote(password)]


def job_redactor(*, job: EvalJob, extra: Iterable[str | None] = ()) -> Redactor:
    """A redactor that knows the server's provider keys, the job's task app key and the
    credentials in its task app's URL, and `extra`."""
    known = [*server_secrets(), job_task_app_key(job) or "", *url_credentials(job.task_app_url)]
    return Redactor([*known, *(s or "" for s in extra)])


class RedactingFilter(logging.Filter):
    """Scrubs log records: access logs carry interceptor URLs, and an exception's text may
    carry whatever a provider or task app answered. Installed on the console handler (see
    settings.LOGGING) and on uvicorn's loggers when the web process starts."""

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = server_redactor()
        if isinstance(record.args, tuple) and record.args:
            # Keep the arguments' shape: formatters such as uvicorn's access log read them.
            record.msg = redactor.text(str(record.msg))
            record.args = tuple(redactor.text(a) if isinstance(a, str) else a for a in record.args)
        else:
            message = record.getMessage()
            clean = redactor.text(message)
            if clean != message:
                record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            scrubbed = redactor.text(text)
            if scrubbed != text:
                record.exc_info, record.exc_text = None, scrubbed
        return True
