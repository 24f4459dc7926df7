"""GET /healthz: does the database answer, does the broker answer, and are workers consuming.

`workers` counts the workers whose heartbeat is fresh (evalhub.heartbeats): a worker writes it
from its consumer loop, so a worker process that is alive but no longer consumes is not
counted. Every check is bounded (well under a second), so the answer comes quickly even when
the broker is down. 200 when everything answers and at least one worker consumes, else 503.
Each worker's line carries what its process reports with its heartbeat: `otel`, the spans it
exported, dropped and holds (traces.otel.export, docs/observability.md).
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


def _workers() -> tuple[str | None, list[dict], list[dict]]:
    """An error or None, the consuming workers, the draining ones (alive, finishing their
    runners' slices after losing their consumer: evalhub.celery.Drain)."""
    if not heartbeats.supported():  # AMQP: workers write no heartbeat there
        return None, [], []
    try:
        live = heartbeats.live_workers()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", [], []
    consuming = [w for w in live if not w["draining"]]
    draining = [w for w in live if w["draining"]]
    if not consuming:
        return f"no worker consumed in the last {heartbeats.HEARTBEAT_TTL_S:g}s", [], draining
    return None, consuming, draining


def healthz(request):
    checks = {"database": _database(), "broker": _broker()}
    if checks["broker"] is None:
        checks["workers"], live, draining = _workers()
    else:
        checks["workers"], live, draining = "unknown: the broker does not answer", [], []
    ok = all(v is None for v in checks.values())
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": {name: ("ok" if err is None else err) for name, err in checks.items()},
        "workers": live,
        "draining": draining,
    }
    response = JsonResponse(body, status=200 if ok else 503)
    # A 503 here answers a probe (a server starting, a broker down), it is no server error: not
    # logged at ERROR by Django for every probe (three lines at each `make demo` start).
    response._has_been_logged = True
    return response
