"""What the redactor masks, and what it leaves alone."""

from __future__ import annotations

from evalhub.secretkeys import secret_keys_masked
from traces.redaction import REDACTED, Redactor, server_secrets


def test_secret_named_keys_are_masked_in_any_case_and_spelling():
    value = {
        "Authorization": "Bearer abc", "x-api-key": "k1", "X_API_KEYS": "k1,k2", "api_key": "k3",
        "openai_api_key": "k4", "nested": [{"proxy-authorization": "Basic xyz"}],
    }  # fmt: skip
    out = Redactor().value(value)
    assert out == {
        "Authorization": REDACTED, "x-api-key": REDACTED, "X_API_KEYS": REDACTED,
        "api_key": REDACTED, "openai_api_key": REDACTED, "nested": [{"proxy-authorization": REDACTED}],
    }  # fmt: skip


def test_a_service_s_own_auth_headers_are_masked_and_look_alike_keys_kept():
    headers = {"X-Custom-Auth": "c1", "X-Auth-Token": "c2", "auth": "user:pw", "basic_auth": "b",
               "X-Amz-Security-Token": "s1", "Private-Token": "p1"}  # fmt: skip
    kept = {"author": "Ann", "oauth": "enabled", "auth_mode": "none", "token": "Hello",
            "eos_token": "</s>", "max_tokens": 5}  # fmt: skip
    value = {"policy": {"extra_headers": headers}, "logprobs": [kept]}
    out = Redactor().value(value)
    assert out == {"policy": {"extra_headers": dict.fromkeys(headers, REDACTED)},
                   "logprobs": [kept]}  # fmt: skip
    assert secret_keys_masked(value) == out  # a job's settings as shown: the same rule


def test_ordinary_fields_and_empty_secret_fields_are_kept():
    value = {"max_tokens": 5, "tokens": 12, "api_key": None, "has_task_app_api_key": True,
             "content": "use the token budget wisely"}  # fmt: skip
    assert Redactor().value(value) == value


def test_interceptor_tokens_and_bearer_values_are_masked_inside_strings():
    out = Redactor().text(
        "POST http://h:8000/api/interceptor/v1/Zx_9-abc/chat/completions?x=1 "
        "with header Authorization: Bearer sk-live-123456789"
    )
    assert out == (
        f"POST http://h:8000/api/interceptor/v1/{REDACTED}/chat/completions?x=1 "
        f"with header Authorization: Bearer {REDACTED}"
    )


def test_known_secret_values_are_masked_under_any_key_and_inside_keys():
    redactor = Redactor(["s3cr3t-value-123"])
    out = redactor.value({"note": "key=s3cr3t-value-123;", "s3cr3t-value-123": 1})
    assert out == {"note": f"key={REDACTED};", REDACTED: 1}


def test_short_values_are_not_treated_as_secrets():
    assert Redactor(["abc"]).text("abcdef") == "abcdef"


def test_server_secrets_are_the_keys_of_every_configured_provider(settings):
    # EVALHUB_PROVIDERS names the variables; the keys themselves are in EVALHUB_UPSTREAMS.
    settings.EVALHUB_PROVIDERS = {"groq": {"base_url": "http://x", "api_key_env": "GROQ_KEY"}}
    settings.EVALHUB_UPSTREAMS = {
        "openai": {"base_url": "http://o", "api_key": "sk-openai-1234567890"},
        "groq": {"base_url": "http://x", "api_key": "gsk-0987654321"},
        "local": {"base_url": "http://l", "api_key": ""},
    }
    settings.AWS_SECRET_ACCESS_KEY = ""
    assert set(server_secrets()) == {"sk-openai-1234567890", "gsk-0987654321"}


def test_values_nested_deeper_than_the_recursion_limit_are_scrubbed():
    deep: object = "Bearer sk-live-123456789"
    for _ in range(5000):
        deep = {"a": [deep]}
    out = Redactor().value(deep)
    for _ in range(5000):
        out = out["a"][0]
    assert out == f"Bearer {REDACTED}"


def test_the_settings_shown_mask_what_is_set_under_secret_named_keys_at_any_depth():
    value = {"model": "m", "api_key": "k1", "headers": [{"X-Api-Key": "k2", "accept": "json"}],
             "password": "", "session_token": None, "max_tokens": 5, "temperature": 0.2}  # fmt: skip
    assert secret_keys_masked(value) == {
        "model": "m", "api_key": REDACTED, "headers": [{"X-Api-Key": REDACTED, "accept": "json"}],
        "password": "", "session_token": None, "max_tokens": 5, "temperature": 0.2,
    }  # fmt: skip
    assert value["api_key"] == "k1"  # a copy: the job keeps its own
    ordered = secret_keys_masked({"z": 1, "a": {"y": 2, "b": 3}, "m": [1], "api_key": "k"})
    assert list(ordered) == ["z", "a", "m", "api_key"] and list(ordered["a"]) == ["y", "b"]
    # The same keys as the redactor, whose rule it is.
    assert secret_keys_masked(value) == {**Redactor().value(value)}
    deep: object = {"api_key": "k3"}
    for _ in range(5000):
        deep = {"a": [deep]}
    out = secret_keys_masked(deep)
    for _ in range(5000):
        out = out["a"][0]
    assert out == {"api_key": REDACTED}
