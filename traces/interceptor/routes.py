"""The wire formats the interceptor serves, and which provider (and model) serves a call.

Each route is forwarded to the same path of a provider of its kind, with the server's key in
that kind's header: `authorization: Bearer` for `openai`, `x-api-key` (and `anthropic-version`)
for `anthropic`. Nothing of the caller's headers but the Anthropic version and beta flags is
passed on, so the caller's own key never reaches the provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from traces.interceptor.errors import InterceptorError
from traces.results import selectors

ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Route:
    name: str  # recorded on LLMCall.route
    kind: str  # the provider kind that speaks it
    path: str  # appended to the provider's base_url
    method: str = "POST"
    # Streams carry usage only when asked for it (`stream_options.include_usage`).
    asks_usage: bool = False


_MESSAGES = Route("messages", "anthropic", "/v1/messages")
# By the path after `<INTERCEPTOR_PATH><token>/`.
ROUTES = {
    "chat/completions": Route("chat.completions", "openai", "/chat/completions", asks_usage=True),
    "completions": Route("completions", "openai", "/completions", asks_usage=True),
    "responses": Route("responses", "openai", "/responses"),
    "embeddings": Route("embeddings", "openai", "/embeddings"),
    # Anthropic's SDK appends /v1/messages to ANTHROPIC_BASE_URL; the OpenAI-style base URL
    # (which ends in /v1) gets /messages.
    "messages": _MESSAGES,
    "v1/messages": _MESSAGES,
    "models": Route("models", "openai", "/models", method="GET"),
}
ROUTE_LIST = "/chat/completions, /responses, /completions, /embeddings, /messages, /models"


def upstream_headers(upstream: dict[str, Any], scope_headers) -> dict[str, str]:
    """The headers a call is forwarded with: the server's key, never the caller's."""
    key = upstream["api_key"]
    headers = {"content-type": "application/json"}
    if upstream.get("kind") == "anthropic":
        caller = {name.lower(): value for name, value in scope_headers}
        headers["anthropic-version"] = _header(caller.get(b"anthropic-version"), ANTHROPIC_VERSION)
        beta = _header(caller.get(b"anthropic-beta"), "")
        if beta:
            headers["anthropic-beta"] = beta
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    return headers


def _header(value: bytes | None, default: str) -> str:
    if not value:
        return default
    text = value.decode("latin-1")
    # Only a version or flags: letters, digits and punctuation, short.
    return text if len(text) < 200 and all(c.isalnum() or c in "-_,. " for c in text) else default


def upstream_of(name: str) -> dict[str, Any]:
    upstream = settings.EVALHUB_UPSTREAMS.get(name)
    if upstream is None:
        raise InterceptorError(
            502, "provider_not_configured", f"Provider {name!r} is not configured on this server."
        )
    return upstream


def choose(access: selectors.AttemptAccess, route: Route, model: Any) -> tuple[dict, str | None]:
    """(the upstream serving this call, the model to send it instead of the requested one when
    the request names an alias of EVALHUB_PROVIDERS.aliases)."""
    alias = settings.EVALHUB_MODEL_ALIASES.get(model) if isinstance(model, str) else None
    upstream = upstream_of(alias["provider"] if alias else access.provider)
    if upstream.get("kind", "openai") != route.kind:
        raise InterceptorError(
            400,
            "unsupported_route",
            f"Provider {upstream.get('name')!r} speaks the {upstream.get('kind')} API; "
            f"/{route.name.replace('.', '/')} needs a provider of kind {route.kind!r}.",
        )
    return upstream, (alias["model"] if alias else None)
