"""The logging configuration: one console handler, every line through the one redactor."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def logging_config(level: str) -> dict[str, Any]:
    """Django's LOGGING for `level` (LOG_LEVEL)."""
    if level not in LEVELS:
        raise ImproperlyConfigured(f"LOG_LEVEL={level!r}: use DEBUG, INFO, WARNING or ERROR")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        # Every line goes through the one redactor: no provider key or interceptor token in logs.
        "filters": {"redact": {"()": "traces.redaction.RedactingFilter"}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "filters": ["redact"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        # evalhub's own at LOG_LEVEL even where the root is quieter (`make run`'s worker runs
        # Celery at WARNING: evalhub.runall).
        "loggers": {
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
            **{name: {"level": level} for name in ("evalhub", "jobs", "traces")},
        },
    }
