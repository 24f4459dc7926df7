"""The interceptor's upstream providers, read from OPENAI_BASE_URL/OPENAI_API_KEY and
EVALHUB_PROVIDERS (docs/interceptor.md documents every field).

`EVALHUB_PROVIDERS` is a JSON object of providers by name, plus one reserved key, `aliases`:

    {"groq": {"base_url": "https://api.groq.com/openai/v1", "api_key_env": "GROQ_API_KEY",
              "rpm": 30, "tpm": 60000, "max_retries": 3, "fallback": "openai"},
     "claude": {"kind": "anthropic", "base_url": "https://api.anthropic.com",
                "api_key_env": "ANTHROPIC_API_KEY"},
     "aliases": {"fast": {"provider": "groq", "model": "llama-3.1-8b-instant"}}}
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from evalhub.env import envstr, envurl

KINDS = ("openai", "anthropic")
DEFAULT_MAX_RETRIES = 2
# The price list genai-prices keeps each kind's models under, when the entry names none.
_DEFAULT_PRICE_PROVIDER = {"anthropic": "anthropic"}


def upstreams_from(
    providers: Any, *, openai_base_url: str, openai_api_key: str
) -> tuple[dict[str, dict], dict[str, dict]]:
    """(upstreams by provider name, aliases by name), checked; a bad entry stops the process."""
    if not isinstance(providers, dict):
        raise ImproperlyConfigured("EVALHUB_PROVIDERS must be a JSON object")
    upstreams: dict[str, dict] = {
        "openai": _upstream("openai", {"price_provider": "openai"}, openai_base_url, openai_api_key)
    }
    for name, entry in providers.items():
        if name == "aliases":
            continue
        where = f"EVALHUB_PROVIDERS[{name!r}]"
        if name == "openai" and isinstance(entry, dict) and "base_url" not in entry:
            # Settings for the built-in provider (retries, rpm...): its URL and key stay.
            upstreams[name] = _upstream(
                name, {"price_provider": "openai", **entry}, openai_base_url, openai_api_key
            )
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("base_url"), str):
            raise ImproperlyConfigured(f"{where} must be an object with a string base_url")
        key_env = entry.get("api_key_env")
        if key_env is not None and not isinstance(key_env, str):
            raise ImproperlyConfigured(f"{where}.api_key_env must be a string")
        base_url = envurl(f"EVALHUB_PROVIDERS[{name}]", entry["base_url"])
        upstreams[name] = _upstream(name, entry, base_url, envstr(key_env) if key_env else "")
    for name, upstream in upstreams.items():
        fallback = upstream["fallback"]
        if fallback is not None and (fallback not in upstreams or fallback == name):
            raise ImproperlyConfigured(
                f"EVALHUB_PROVIDERS[{name!r}].fallback names no other provider: {fallback!r}"
            )
        if fallback is not None and upstreams[fallback]["kind"] != upstream["kind"]:
            raise ImproperlyConfigured(
                f"EVALHUB_PROVIDERS[{name!r}].fallback {fallback!r} is not of kind {upstream['kind']}"
            )
    return upstreams, _aliases(providers.get("aliases", {}), upstreams)


def _upstream(name: str, entry: dict, base_url: str, api_key: str) -> dict[str, Any]:
    where = f"EVALHUB_PROVIDERS[{name!r}]"
    kind = entry.get("kind", "openai")
    if kind not in KINDS:
        raise ImproperlyConfigured(f"{where}.kind must be one of {', '.join(KINDS)}")
    price_provider = entry.get("price_provider", _DEFAULT_PRICE_PROVIDER.get(kind, name))
    if price_provider is not None and not isinstance(price_provider, str):
        raise ImproperlyConfigured(f"{where}.price_provider must be a string")
    fallback = entry.get("fallback")
    if fallback is not None and not isinstance(fallback, str):
        raise ImproperlyConfigured(f"{where}.fallback must be a provider name")
    return {
        "name": name,
        "kind": kind,
        "base_url": base_url,
        "api_key": api_key,
        "price_provider": price_provider,
        "max_retries": _number(entry, "max_retries", where, DEFAULT_MAX_RETRIES, integer=True),
        "rpm": _number(entry, "rpm", where, None),
        "tpm": _number(entry, "tpm", where, None),
        "fallback": fallback,
    }


def _number(entry: dict, field: str, where: str, default, *, integer: bool = False):
    value = entry.get(field, default)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or value < 0 or (field in ("rpm", "tpm") and value == 0):
        raise ImproperlyConfigured(f"{where}.{field} must be a positive number")
    return value


def _aliases(aliases: Any, upstreams: dict[str, dict]) -> dict[str, dict]:
    if not isinstance(aliases, dict):
        raise ImproperlyConfigured("EVALHUB_PROVIDERS.aliases must be a JSON object")
    out = {}
    for alias, target in aliases.items():
        where = f"EVALHUB_PROVIDERS.aliases[{alias!r}]"
        if not isinstance(target, dict) or not isinstance(target.get("model"), str):
            raise ImproperlyConfigured(f"{where} must be {{'provider': name, 'model': model}}")
        provider = target.get("provider", "openai")
        if provider not in upstreams:
            raise ImproperlyConfigured(f"{where}.provider names no provider: {provider!r}")
        out[alias] = {"provider": provider, "model": target["model"]}
    return out


def providers_usable(upstreams: dict[str, dict]) -> bool:
    """Whether any provider can answer: one with a key, or one of EVALHUB_PROVIDERS (a local
    server such as vLLM may need none). Without, every LLM call of every job fails."""
    return any(u["api_key"] or u["name"] != "openai" for u in upstreams.values())


def model_prices_from(prices: Any) -> dict[str, dict[str, float]]:
    """EVALHUB_MODEL_PRICES checked: per model, USD per million tokens that win over
    genai-prices."""
    if not isinstance(prices, dict) or not all(
        isinstance(p, dict)
        and "input_per_mtok" in p
        and "output_per_mtok" in p
        and all(isinstance(v, int | float) for v in p.values())
        for p in prices.values()
    ):
        raise ImproperlyConfigured(
            "EVALHUB_MODEL_PRICES must be a JSON object of "
            '{"model": {"input_per_mtok": n, "output_per_mtok": n, "cache_read_per_mtok": n}}'
        )
    return prices
