"""evalhub settings: every value comes from the environment, read here and only here.

With no environment at all, evalhub runs embedded: SQLite and a file-system Celery broker in
`EVALHUB_DATA_DIR`, trace files on local disk. Production differs only by variables
(`DATABASE_URL`, `REDIS_URL`/`CELERY_BROKER_URL`, `EVALHUB_S3_BUCKET`, ...). docs/configuration.md lists them all.
"""

from __future__ import annotations

import importlib.metadata
import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from evalhub.env import envbool, envfloat, envint, envjson, envstr, envurl
from evalhub.logconfig import logging_config
from evalhub.providers import model_prices_from, upstreams_from

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(envstr("EVALHUB_DATA_DIR", str(BASE_DIR / "var"))).resolve()
# Folders the embedded default needs; evalhub.apps makes them when Django starts.
EVALHUB_DATA_FOLDERS = [DATA_DIR]
try:  # the installed package's version (pyproject.toml), shown by /api/docs
    EVALHUB_VERSION = importlib.metadata.version("evalhub")
except importlib.metadata.PackageNotFoundError:  # a checkout run without installing it
    EVALHUB_VERSION = "dev"


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated on first start and kept on disk.
    The one file settings may write: every process (web, worker, manage.py) must agree on the
    key before Django starts, and no hook runs earlier. Created exclusively, so two processes
    starting together cannot write two different keys."""
    given = envstr("SECRET_KEY")
    if given:
        return given
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x") as f:
                f.write(secrets.token_urlsafe(50))
            path.chmod(0o600)
        except FileExistsError:
            pass
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = envbool("DEBUG", False)
PORT = envint("PORT", 8000, minimum=1, maximum=65535)
# Interface `make run` binds, and job threads of the worker it starts.
HOST = envstr("HOST", "127.0.0.1")
EVALHUB_WORKER_CONCURRENCY = envint("EVALHUB_WORKER_CONCURRENCY", 8, minimum=1)
# Web processes `make run` starts (uvicorn workers sharing the port); default one per core.
EVALHUB_WEB_CONCURRENCY = envint(
    "EVALHUB_WEB_CONCURRENCY", os.cpu_count() or 1, minimum=1, maximum=256
)
# Read deadlines of the web server (evalhub/webserver.py): a request's head must arrive whole
# within EVALHUB_HEADERS_TIMEOUT_S, and its body may pause at most EVALHUB_BODY_TIMEOUT_S.
EVALHUB_HEADERS_TIMEOUT_S = envfloat("EVALHUB_HEADERS_TIMEOUT_S", 10.0, minimum=0.1)
EVALHUB_BODY_TIMEOUT_S = envfloat("EVALHUB_BODY_TIMEOUT_S", 30.0, minimum=0.1)
EVALHUB_PUBLIC_URL = envurl("EVALHUB_PUBLIC_URL", f"http://127.0.0.1:{PORT}")
ALLOWED_HOSTS = [h.strip() for h in envstr("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in envstr("CSRF_TRUSTED_ORIGINS", EVALHUB_PUBLIC_URL).split(",") if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "evalhub",
    "jobs",
    "traces",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "evalhub.middleware.DatabaseUnavailableMiddleware",
    "evalhub.middleware.RequestSizeLimitMiddleware",
    "evalhub.middleware.NulRefusalMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "evalhub.urls"
ASGI_APPLICATION = "evalhub.asgi.application"
WSGI_APPLICATION = "evalhub.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
_default_db = f"sqlite:///{DATA_DIR / 'evalhub.sqlite3'}"
try:
    DATABASES = {"default": dj_database_url.parse(envstr("DATABASE_URL", _default_db))}
except Exception as exc:  # dj_database_url raises several types for a bad URL
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # Several processes (web, workers) write to one file: take the write lock when a
        # transaction starts, wait for it instead of failing, and let readers run beside writers.
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory: the tests' worker and web processes open the same test database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
else:
    DATABASES["default"]["CONN_MAX_AGE"] = envint("DATABASE_CONN_MAX_AGE", 60, minimum=0)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery -----------------------------------------------------------------------------------
_broker_dir = DATA_DIR / "broker"
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL") or envstr("REDIS_URL") or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    CELERY_BROKER_TRANSPORT = "evalhub.filebroker:Transport"  # messages written whole
    EVALHUB_DATA_FOLDERS += [_broker_dir / sub for sub in ("queue", "processed", "control")]
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        # Broadcast (remote-control) messages; without this kombu writes ./control in the cwd.
        "control_folder": str(_broker_dir / "control"),
    }
elif not CELERY_BROKER_URL.startswith(("redis://", "rediss://", "amqp://", "sqla+")):
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL/REDIS_URL={CELERY_BROKER_URL!r}: expected redis://, rediss:// or amqp://"
    )
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_ALWAYS_EAGER = False
# One queue name per deployment, so several evalhub installations can share one Redis.
CELERY_TASK_DEFAULT_QUEUE = envstr("EVALHUB_CELERY_QUEUE", "evalhub")

# --- Storage (trace files, zips) -------------------------------------------------------------
EVALHUB_S3_BUCKET = envstr("EVALHUB_S3_BUCKET")
if EVALHUB_S3_BUCKET:
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": EVALHUB_S3_BUCKET,
            "endpoint_url": envurl("EVALHUB_S3_ENDPOINT_URL") or None,
            "region_name": envstr("EVALHUB_S3_REGION") or None,
            "location": envstr("EVALHUB_S3_PREFIX", "evalhub"),
            "default_acl": None,
            "querystring_auth": True,
            "file_overwrite": True,
        },
    }
else:
    _default_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(DATA_DIR / "files")},
    }
STORAGES = {
    "default": _default_storage,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# S3 credentials (django-storages reads them here; unset, boto3 looks in its usual places).
AWS_ACCESS_KEY_ID = envstr("AWS_ACCESS_KEY_ID") or None
AWS_SECRET_ACCESS_KEY = envstr("AWS_SECRET_ACCESS_KEY") or None
# Days the heavy trace content of a finished job is kept (`manage.py prunetraces`); 0 = forever.
EVALHUB_TRACE_RETENTION_DAYS = envint("EVALHUB_TRACE_RETENTION_DAYS", 30, minimum=0)

# --- The upstream LLM provider ----------------------------------------------------------------
OPENAI_BASE_URL = envurl("OPENAI_BASE_URL", "https://api.openai.com/v1")
OPENAI_API_KEY = envstr("OPENAI_API_KEY")

# --- Limits -------------------------------------------------------------------------------------
EVALHUB_MAX_SEEDS = envint("EVALHUB_MAX_SEEDS", 100_000, minimum=1)
EVALHUB_MAX_REPEATS = envint("EVALHUB_MAX_REPEATS", 100, minimum=1)
EVALHUB_MAX_CONCURRENT = envint("EVALHUB_MAX_CONCURRENT", 1000, minimum=1)
EVALHUB_MAX_TIMEOUT_S = envfloat("EVALHUB_MAX_TIMEOUT_S", 24 * 3600.0, minimum=1.0)
EVALHUB_MAX_REQUEST_BYTES = envint("EVALHUB_MAX_REQUEST_BYTES", 10 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = EVALHUB_MAX_REQUEST_BYTES
# The largest `metadata` of a job, serialized as compact UTF-8 JSON: it is kept whole in the
# job's status; the jobs list leaves it out.
EVALHUB_MAX_METADATA_BYTES = envint("EVALHUB_MAX_METADATA_BYTES", 64 * 1024, minimum=2)
# The largest task-app answer to POST /rollout a worker reads; a larger one fails its seed.
EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES = envint(
    "EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES", 16 * 1024 * 1024, minimum=1024
)
EVALHUB_ROLLOUT_MAX_ATTEMPTS = envint("EVALHUB_ROLLOUT_MAX_ATTEMPTS", 3, minimum=1, maximum=20)
# Tries lost to our own faults (a worker killed while it held the seed, the interceptor down)
# are retried without using up the task app's attempts, up to this many; a seed that keeps
# taking its worker down with it must still end.
EVALHUB_SEED_MAX_LOSSES = envint("EVALHUB_SEED_MAX_LOSSES", 10, minimum=1, maximum=1000)

# --- Workers ---------------------------------------------------------------------------------
# A worker holds a seed run for EVALHUB_LEASE_S seconds and renews the lease while it works; a
# seed whose lease expired (its worker died) is claimed again by another worker.
EVALHUB_LEASE_S = envfloat("EVALHUB_LEASE_S", 60.0, minimum=1.0)
# As a job ends a worker builds its traces zip into storage, this many seconds later: the web
# processes save LLM calls a moment after answering them, and the stored zip must hold them all.
EVALHUB_TRACES_ZIP_AFTER_S = envfloat("EVALHUB_TRACES_ZIP_AFTER_S", 5.0, minimum=0.0)
# Backoff before retrying a transient task-app failure: base * 2^(attempt-1), full jitter, capped.
EVALHUB_ROLLOUT_BACKOFF_S = envfloat("EVALHUB_ROLLOUT_BACKOFF_S", 1.0, minimum=0.0)
EVALHUB_ROLLOUT_BACKOFF_MAX_S = envfloat("EVALHUB_ROLLOUT_BACKOFF_MAX_S", 60.0, minimum=0.0)
EVALHUB_TASK_APP_CONNECT_TIMEOUT_S = envfloat(
    "EVALHUB_TASK_APP_CONNECT_TIMEOUT_S", 10.0, minimum=0.1
)
# Most rollouts and judgements one runner holds in flight; a job whose max_concurrent is larger
# spreads over several runners, on any worker (jobs/worker/runner.py).
EVALHUB_RUNNER_MAX_INFLIGHT = envint("EVALHUB_RUNNER_MAX_INFLIGHT", 64, minimum=1)
# The bytes a worker process gives to task-app answers in flight, from the moment one is read
# until its result is written (jobs/worker/answer_budget.py): a big answer waits for its share,
# its socket unread, so max_concurrent times the answer size never lands in one worker at once.
EVALHUB_WORKER_ANSWER_BUDGET_BYTES = envint(
    "EVALHUB_WORKER_ANSWER_BUDGET_BYTES", 256 * 1024 * 1024, minimum=1024 * 1024
)
# Allocations between two young collections in a worker process (CPython's: 700; evalhub/heap.py).
EVALHUB_WORKER_GC_GEN0 = envint("EVALHUB_WORKER_GC_GEN0", 50_000, minimum=1)
# How long a runner claims work for a job before, if other messages wait, it hands the job's
# message back and drains: jobs on busy workers take turns about this often (docs/workers.md).
EVALHUB_RUNNER_SLICE_S = envfloat("EVALHUB_RUNNER_SLICE_S", 30.0, minimum=0.1)
# How long a runner waits for the database to come back (a restart, a failover) before it
# gives up its slice; its rollouts in flight go on meanwhile.
EVALHUB_DB_OUTAGE_S = envfloat("EVALHUB_DB_OUTAGE_S", 60.0, minimum=0.0)
# How often Celery beat looks for jobs nobody works on (a killed worker, a lost message).
EVALHUB_REDISPATCH_INTERVAL_S = envfloat("EVALHUB_REDISPATCH_INTERVAL_S", 2.0, minimum=0.2)
# A worker whose heartbeats (every 2 s) stopped this long ago is taken for dead: the leases it
# held end at the next redispatch, and its rollouts are run again at once (jobs.tasks).
EVALHUB_WORKER_LOST_S = envfloat("EVALHUB_WORKER_LOST_S", 5.0, minimum=2.5)
# A worker that lost its consumer (a broker restart) stops taking messages but lets its runners
# finish their slices (they need only the database), beating meanwhile, for at most this long;
# then it exits for its supervisor to start it again (evalhub/celery.py).
EVALHUB_WORKER_DRAIN_S = envfloat("EVALHUB_WORKER_DRAIN_S", 120.0, minimum=0.0)
CELERY_BEAT_SCHEDULE = {
    "evalhub-jobs-redispatch": {
        "task": "jobs.jobs_redispatch",
        "schedule": EVALHUB_REDISPATCH_INTERVAL_S,
        "options": {"expires": EVALHUB_REDISPATCH_INTERVAL_S},
    },
    # Retention (EVALHUB_TRACE_RETENTION_DAYS); `manage.py prunetraces` does the same by hand.
    "evalhub-traces-prune": {
        "task": "traces.traces_prune_daily",
        "schedule": 24 * 3600.0,
        "options": {"expires": 3600.0},
    },
}

# --- Auth, API --------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["jobs.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["jobs.fields.BoundedJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "jobs.api.negotiation.FormatNamedNegotiation",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "jobs.api.jobs.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "evalhub API",
    "DESCRIPTION": (
        "Eval jobs for LLM agents: submit a job (a task app and seeds), follow its events, read "
        "its results and download its traces. Every call takes `Authorization: Bearer <API "
        "key>` (make one on the dashboard's API keys page). A guide: docs/api.md."
    ),
    "VERSION": EVALHUB_VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # ReDoc from drf-spectacular-sidecar's static files, not a CDN: /api/docs works offline.
    "REDOC_DIST": "SIDECAR",
    "PREPROCESSING_HOOKS": ["jobs.api.schema.api_paths_only"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "jobs.api.schema.schema_completed",  # the event stream, the groups described
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "jobs.models.JobStatus",
        "SeedStatusEnum": "jobs.models.SeedStatus",
        "EventTypeEnum": "jobs.events.EventType",
        "TaskAppKindEnum": "jobs.kinds.KINDS",
    },
}

# --- Misc -------------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
EVALHUB_DATA_FOLDERS.append(STATIC_ROOT)
LOG_LEVEL = envstr("LOG_LEVEL", "INFO").upper()
LOGGING = logging_config(LOG_LEVEL)

# Extra provider settings read by the interceptor (docs/interceptor.md).
EVALHUB_PROVIDERS = envjson("EVALHUB_PROVIDERS", {})

# --- Dashboard ----------------------------------------------------------------------------------
# Serve the dashboard's CSS and JS straight from the apps' static folders too, so a process
# that never ran collectstatic (a fresh checkout, the tests' web server) still has them.
WHITENOISE_USE_FINDERS = True

# --- The LLM interceptor (docs/interceptor.md) -----------------------------------------------
# Upstreams by provider name (`openai` from OPENAI_BASE_URL/OPENAI_API_KEY, the rest from
# EVALHUB_PROVIDERS: kind, keys, retries, rpm/tpm, fallback) and model aliases.
EVALHUB_UPSTREAMS, EVALHUB_MODEL_ALIASES = upstreams_from(
    EVALHUB_PROVIDERS, openai_base_url=OPENAI_BASE_URL, openai_api_key=OPENAI_API_KEY
)
# Per-model prices (USD per million tokens) that win over genai-prices, e.g. for own models.
EVALHUB_MODEL_PRICES = model_prices_from(envjson("EVALHUB_MODEL_PRICES", {}))
# A token keeps working this long after its attempt ended (0: refused at once).
EVALHUB_INTERCEPTOR_GRACE_S = envfloat("EVALHUB_INTERCEPTOR_GRACE_S", 0.0, minimum=0.0)
# How often each web process asks which of the attempts it serves have ended (one query for
# all of them): the safety net of the ends workers push (evalhub.revocations), so an end the
# push missed is refused (410) at most this long after it ended.
EVALHUB_INTERCEPTOR_REVOCATION_POLL_S = envfloat(
    "EVALHUB_INTERCEPTOR_REVOCATION_POLL_S", 0.5, minimum=0.05
)
# A verifier's judge starts this long after the rollout ended, so the interceptor's writer has
# recorded the policy's last calls (the judge reads them).
EVALHUB_VERIFIER_SETTLE_S = envfloat("EVALHUB_VERIFIER_SETTLE_S", 1.0, minimum=0.0)
# How long a resolved token is trusted without asking the database again.
EVALHUB_INTERCEPTOR_TOKEN_TTL_S = envfloat("EVALHUB_INTERCEPTOR_TOKEN_TTL_S", 5.0, minimum=0.0)
# How often a job's spent totals (for budgets) are re-read from the database.
EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S = envfloat(
    "EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S", 5.0, minimum=0.0
)
EVALHUB_INTERCEPTOR_CONNECT_TIMEOUT_S = envfloat(
    "EVALHUB_INTERCEPTOR_CONNECT_TIMEOUT_S", 10.0, minimum=0.1
)
# Longest wait for the upstream's next bytes (a reasoning model may think for minutes).
EVALHUB_INTERCEPTOR_READ_TIMEOUT_S = envfloat(
    "EVALHUB_INTERCEPTOR_READ_TIMEOUT_S", 600.0, minimum=0.1
)
EVALHUB_INTERCEPTOR_MAX_CONNECTIONS = envint("EVALHUB_INTERCEPTOR_MAX_CONNECTIONS", 1000, minimum=1)
# A call's row still in flight this long after it started was lost with its web process: beat
# marks it lost, usage unknown (traces.calls.recording); an answer that still comes completes it.
_LOST_S = EVALHUB_INTERCEPTOR_READ_TIMEOUT_S + 300.0  # the provider's longest wait, and retries
EVALHUB_LLM_CALL_LOST_S = envfloat("EVALHUB_LLM_CALL_LOST_S", _LOST_S, minimum=1.0)
CELERY_BEAT_SCHEDULE["evalhub-llm-calls-lost"] = {"task": "traces.llm_calls_lost_mark", "options": {
    "expires": 60.0}, "schedule": min(60.0, max(1.0, EVALHUB_LLM_CALL_LOST_S / 4))}  # fmt: skip

# OpenTelemetry export of each sample as a trace (traces/otel/, docs/observability.md): the
# standard variables of the OTLP exporter; off while no endpoint is set.
OTEL_EXPORTER_OTLP_ENDPOINT = envstr("OTEL_EXPORTER_OTLP_ENDPOINT")
# A traces-only endpoint, used as given (the one above gets `/v1/traces` appended).
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = envstr("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# `key=value,key2=value2` (values URL-encoded), e.g. `authorization=Bearer%20...` for Langfuse.
OTEL_EXPORTER_OTLP_HEADERS = envstr("OTEL_EXPORTER_OTLP_HEADERS")
OTEL_SERVICE_NAME = envstr("OTEL_SERVICE_NAME", "evalhub")
# Milliseconds one export may take, as the specification counts it.
OTEL_EXPORTER_OTLP_TIMEOUT = envint("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000, minimum=1)
# Spans waiting for export in a worker process; past it spans are dropped and counted
# (/healthz, the worker's log), never waited for.
EVALHUB_OTEL_QUEUE_SPANS = envint("EVALHUB_OTEL_QUEUE_SPANS", 20_000, minimum=1)
# Prometheus metrics (evalhub/metrics.py): each process counts into files of its own under
# EVALHUB_METRICS_DIR/<host>, set before prometheus_client is imported (it reads it then).
EVALHUB_METRICS_DIR = Path(envstr("EVALHUB_METRICS_DIR", str(DATA_DIR / "metrics"))).resolve()
EVALHUB_METRICS_TOKEN = envstr("EVALHUB_METRICS_TOKEN")  # /metrics answers only this bearer
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(EVALHUB_METRICS_DIR / os.uname().nodename)
EVALHUB_DATA_FOLDERS.append(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
