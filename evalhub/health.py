"""GET /healthz: does the database answer, does the broker answer."""

from __future__ import annotations

from django.db import connection
from django.http import JsonResponse

from evalhub.celery import app as celery_app


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # any failure is the answer
        return f"{type(exc).__name__}: {exc}"


def _broker() -> str | None:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def healthz(request):
    checks = {"database": _database(), "broker": _broker()}
    ok = all(v is None for v in checks.values())
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": {name: ("ok" if err is None else err) for name, err in checks.items()},
    }
    return JsonResponse(body, status=200 if ok else 503)
