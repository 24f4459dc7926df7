import logging

from traces.redaction import RedactingFilter
from traces.tokens import token_new


def _access_record(path: str) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", path, "1.1", 200), None,
    )  # fmt: skip


def test_access_log_lines_do_not_carry_interceptor_tokens():
    record = _access_record("/api/interceptor/v1/s3cr3tT0ken/chat/completions")
    assert RedactingFilter().filter(record)
    line = record.getMessage()
    assert "s3cr3tT0ken" not in line
    assert "/api/interceptor/v1/<redacted>/chat/completions" in line
    # uvicorn's access formatter unpacks exactly these five arguments.
    assert isinstance(record.args, tuple) and len(record.args) == 5


def test_a_token_anywhere_in_the_path_is_masked():
    token = token_new()
    record = _access_record(f"/api/interceptor/v1/{token}/../{token}/chat/completions")
    RedactingFilter().filter(record)
    assert token not in record.getMessage()


def test_provider_keys_are_masked_in_log_messages_and_tracebacks(settings):
    from traces.redaction import server_redactor

    settings.EVALHUB_UPSTREAMS = {"groq": {"base_url": "http://x", "api_key": "gsk-0987654321"}}
    server_redactor.cache_clear()
    try:
        try:
            raise RuntimeError("provider said: bad key gsk-0987654321")
        except RuntimeError:
            record = logging.LogRecord(
                "x", logging.ERROR, __file__, 1, "call failed with %s", ("gsk-0987654321",),
                __import__("sys").exc_info(),
            )  # fmt: skip
        RedactingFilter().filter(record)
        text = logging.Formatter().format(record)
        assert "gsk-0987654321" not in text
        assert "call failed with <redacted>" in text and "RuntimeError" in text
    finally:
        server_redactor.cache_clear()
