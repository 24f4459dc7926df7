"""EVALHUB_PROVIDERS as the interceptor reads it: kinds, retries, rpm/tpm, fallback, aliases;
a malformed entry stops the process at start with a message naming it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from evalhub.providers import upstreams_from

OPENAI = {"openai_base_url": "https://api.openai.com/v1", "openai_api_key": "sk-o"}


def test_every_field_is_read_and_the_builtin_provider_takes_settings(monkeypatch):
    monkeypatch.setenv("CLAUDE_KEY", "sk-ant-1")
    upstreams, aliases = upstreams_from(
        {
            "openai": {"max_retries": 5, "rpm": 100},
            "claude": {"kind": "anthropic", "base_url": "https://api.anthropic.com",
                       "api_key_env": "CLAUDE_KEY", "tpm": 1000, "fallback": "claude2"},
            "claude2": {"kind": "anthropic", "base_url": "http://10.0.0.1:8080/"},
            "aliases": {"smart": {"provider": "claude", "model": "claude-sonnet-4-5"}},
        },
        **OPENAI,
    )  # fmt: skip
    openai = upstreams["openai"]
    assert (openai["base_url"], openai["api_key"], openai["max_retries"]) == (
        "https://api.openai.com/v1", "sk-o", 5
    )  # fmt: skip
    claude = upstreams["claude"]
    assert (claude["kind"], claude["api_key"], claude["price_provider"]) == (
        "anthropic", "sk-ant-1", "anthropic"
    )  # fmt: skip
    assert (claude["max_retries"], claude["tpm"], claude["fallback"]) == (2, 1000, "claude2")
    assert upstreams["claude2"]["base_url"] == "http://10.0.0.1:8080"
    assert aliases == {"smart": {"provider": "claude", "model": "claude-sonnet-4-5"}}


@pytest.mark.parametrize(
    ("providers", "named"),
    [
        ({"x": {"base_url": "http://h", "kind": "gemini"}}, "kind"),
        ({"x": {"base_url": "http://h", "max_retries": -1}}, "max_retries"),
        ({"x": {"base_url": "http://h", "rpm": 0}}, "rpm"),
        ({"x": {"base_url": "http://h", "fallback": "nowhere"}}, "fallback"),
        ({"x": {"base_url": "http://h", "kind": "anthropic", "fallback": "openai"}}, "kind"),
        ({"aliases": {"fast": {"provider": "nowhere", "model": "m"}}}, "provider"),
        ({"aliases": {"fast": "gpt-4o-mini"}}, "aliases"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(providers, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        upstreams_from(providers, **OPENAI)
