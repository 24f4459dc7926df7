"""GET /healthz: does the database answer, does the broker answer, and are workers consuming.

`workers` counts the workers whose heartbeat is fresh (evalhub.heartbeats): a worker writes it
from its consumer loop, so a worker process that is alive but no longer consumes is not
counted. Every check is bounded (well under a second), so the answer comes quickly even when
the broker is down. 200 when everything answers and at least one worker consumes, else 503.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import JsonResponse

import evalhub.heartbeats as heartbeats
from evalhub.celery import app as celery_app

BROKER_TIMEOUT_S = 0.5


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # any failure is the answer
        return f"{type(exc).__name__}: {exc}"


def _broker() -> str | None:
    url = settings.CELERY_BROKER_URL
    try:
        if url.startswith(("redis://", "rediss://")):
            client = heartbeats.redis_client(url)
            try:
                client.ping()
            finally:
                client.close()
        elif url == "filesystem://":
            folder = settings.DATA_DIR / "broker" / "queue"
            if not folder.is_dir():
                return f"the broker folder {folder} is missing"
        else:
            with celery_app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _workers() -> tuple[str | None, list[dict]]:
    if not heartbeats.supported():  # AMQP: workers write no heartbeat there
        return None, []
    try:
        live = heartbeats.live_workers()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", []
    if not live:
        return f"no worker consumed in the last {heartbeats.HEARTBEAT_TTL_S:g}s", []
    return None, live


def healthz(request):
    checks = {"database": _database(), "broker": _broker()}
    if checks["broker"] is None:
        checks["workers"], live = _workers()
    else:
        checks["workers"], live = "unknown: the broker does not answer", []
    ok = all(v is None for v in checks.values())
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": {name: ("ok" if err is None else err) for name, err in checks.items()},
        "workers": live,
    }
    return JsonResponse(body, status=200 if ok else 503)
