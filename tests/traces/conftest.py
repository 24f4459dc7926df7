from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from moto.server import ThreadedMotoServer

from evalhub.fakeprovider import FakeOpenAI
from jobs.models import EvalJob, RolloutAttempt, SeedRun
from tests.support import servers
from tests.support.fake_anthropic import FakeAnthropic
from traces.tokens import token_hash, token_new

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "trace.schema.json"
PROVIDER_KEY = "sk-provider-secret-0a9b8c7d6e5f"


@pytest.fixture(autouse=True)
def provider_key(settings):
    """The server's provider key is set, so the tests can look for it where it must not be."""
    settings.OPENAI_API_KEY = PROVIDER_KEY
    upstreams = {name: dict(entry) for name, entry in settings.EVALHUB_UPSTREAMS.items()}
    upstreams["openai"]["api_key"] = PROVIDER_KEY
    settings.EVALHUB_UPSTREAMS = upstreams
    return PROVIDER_KEY


@pytest.fixture(scope="session")
def trace_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server (moto in server mode) on a loopback port."""
    port = servers.free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture
def s3_bucket(s3_server, request) -> str:
    name = f"evalhub-{request.node.name.lower().replace('_', '-')[:40].strip('-[]')}"
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name)
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", **S3_CREDENTIALS)
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def trace_storage(request, settings, tmp_path):
    """STORAGES["default"] on local disk, or the real S3Storage against the loopback S3 server."""
    if request.param == "local":
        backend = {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "files")},
        }
    else:
        endpoint = request.getfixturevalue("s3_server")
        backend = {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": request.getfixturevalue("s3_bucket"),
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "location": "evalhub",
                "default_acl": None,
                "querystring_auth": True,
                "file_overwrite": True,
                "access_key": S3_CREDENTIALS["aws_access_key_id"],
                "secret_key": S3_CREDENTIALS["aws_secret_access_key"],
            },
        }
    settings.STORAGES = {**settings.STORAGES, "default": backend}
    return request.param


SERVER_KEY = "sk-server-side-secret"
# An operator's own prices: one priced model and one free on purpose.
MODEL_PRICES = {
    "house-model": {"input_per_mtok": 2.0, "output_per_mtok": 8.0, "cache_read_per_mtok": 0.5},
    "free-model": {"input_per_mtok": 0, "output_per_mtok": 0},
}
MAX_REQUEST_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def interceptor_web_process(django_db_setup, django_db_blocker, fake_upstream_server):
    """evalhub's web process with `openai` pointed at the fake upstream, once per module."""
    upstream = fake_upstream_server.url
    with django_db_blocker.unblock():
        web, base = servers.start_web(
            OPENAI_BASE_URL=upstream,
            OPENAI_API_KEY=SERVER_KEY,
            EVALHUB_PROVIDERS=json.dumps(
                {
                    # Provider errors reach the caller at once here
                    # (tests/traces/test_resilience.py has the retries).
                    "openai": {"max_retries": 0},
                    "selfhosted": {"base_url": upstream, "api_key_env": "SELFHOSTED_KEY"},
                }
            ),
            SELFHOSTED_KEY="sk-selfhosted-secret",
            EVALHUB_MODEL_PRICES=json.dumps(MODEL_PRICES),
            # Every call re-reads its token, so a test that ends an attempt sees it at once.
            EVALHUB_INTERCEPTOR_TOKEN_TTL_S="0",
            EVALHUB_INTERCEPTOR_GRACE_S="30",
            EVALHUB_INTERCEPTOR_READ_TIMEOUT_S="1.5",
            EVALHUB_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
        )
    yield base
    web.stop()


@pytest.fixture
def interceptor_web(transactional_db, interceptor_web_process, fake_upstream):
    """The module's interceptor web process; yields its base URL."""
    return interceptor_web_process


@dataclass
class Rollout:
    token: str
    attempt: RolloutAttempt
    job: EvalJob


@pytest.fixture
def make_rollout(transactional_db):
    """A factory: a job, a seed run and a running attempt, with the token of its URL."""
    owner, _ = get_user_model().objects.get_or_create(username="alice")

    def make(*, provider: str = "openai", status: str = "running", finished_at=None, **job):
        job_row = EvalJob.objects.create(
            owner=owner,
            task_app_url="http://127.0.0.1:9/",
            policy={"provider": provider, "model": "gpt-4o-mini"},
            num_seeds=1,
            num_samples=1,
            **job,
        )
        seed_run = SeedRun.objects.create(job=job_row, seed=7, status="running")
        token = token_new()
        attempt = RolloutAttempt.objects.create(
            seed_run=seed_run,
            number=1,
            run_id=uuid.uuid4().hex,
            token_hash=token_hash(token),
            status=status,
            started_at=timezone.now(),
            finished_at=finished_at,
        )
        return Rollout(token=token, attempt=attempt, job=job_row)

    return make


ANTHROPIC_SERVER_KEY = "sk-ant-server-side-secret"


@dataclass
class Wire:
    """A web process whose providers speak every wire format, and the fakes behind it."""

    base: str
    openai: FakeOpenAI
    anthropic: FakeAnthropic


@pytest.fixture(scope="module")
def wire_web(django_db_setup, django_db_blocker):
    """evalhub's web process (defaults: no grace, a 5 s token cache, retries) with providers
    `openai` and `fast-openai` (the fake OpenAI, Responses and all), `claude` (kind anthropic,
    the fake Anthropic), `down` (nothing listens; falls back to `openai`), and an alias `fast`."""
    fake_openai, fake_anthropic = FakeOpenAI(), FakeAnthropic()
    with servers.serve_asgi(fake_openai) as openai_base, servers.serve_asgi(fake_anthropic) as ant:
        providers = {
            "claude": {"kind": "anthropic", "base_url": ant, "api_key_env": "CLAUDE_KEY"},
            "down": {
                "base_url": f"http://127.0.0.1:{servers.free_port()}/v1",
                "max_retries": 1,
                "fallback": "openai",
            },
            "fast-openai": {"base_url": f"{openai_base}/v1", "rpm": 60, "max_retries": 0},
            "aliases": {"fast": {"provider": "fast-openai", "model": "gpt-4o-mini"}},
        }
        with django_db_blocker.unblock():
            web, base = servers.start_web(
                OPENAI_BASE_URL=f"{openai_base}/v1",
                OPENAI_API_KEY=SERVER_KEY,
                CLAUDE_KEY=ANTHROPIC_SERVER_KEY,
                EVALHUB_PROVIDERS=json.dumps(providers),
            )
        yield Wire(base, fake_openai, fake_anthropic)
        web.stop()


@pytest.fixture
def wire(wire_web, transactional_db) -> Wire:
    wire_web.openai.received.clear()
    wire_web.anthropic.received.clear()
    return wire_web
