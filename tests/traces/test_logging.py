import logging

from traces.interceptor import RedactTokens


def test_access_log_lines_do_not_carry_interceptor_tokens():
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", "/api/interceptor/v1/s3cr3tT0ken/chat/completions", "1.1", 200),
        None,
    )  # fmt: skip
    assert RedactTokens().filter(record)
    line = record.getMessage()
    assert "s3cr3tT0ken" not in line
    assert "/api/interceptor/v1/<token>/chat/completions" in line
