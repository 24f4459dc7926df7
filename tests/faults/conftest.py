"""The fault suite (tests/faults): real processes, private Redis and PostgreSQL, broken on
purpose. It runs when asked for (`pytest tests/faults`, `-m faults` or `EVALHUB_FAULTS=1`), never
as part of a plain `make test`, and is skipped when the private servers cannot be started."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from evalhub.fakeprovider import FakeOpenAI
from tests.faults.stack import Stack, manage
from tests.support import servers
from tests.support.private_services import (
    PrivatePostgres,
    PrivateRedis,
    ServiceUnavailable,
    workdir_new,
)

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "faults: the fault suite (private Redis and PostgreSQL)")


def _asked_for(config) -> bool:
    if os.environ.get("EVALHUB_FAULTS") == "1" or "faults" in (config.getoption("-m") or ""):
        return True
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if HERE in Path(str(item.fspath)).resolve().parents]
    skip = pytest.mark.skip(reason="the fault suite runs when asked for: pytest tests/faults")
    asked = _asked_for(config)
    for item in mine:
        item.add_marker(pytest.mark.faults)
        if not asked:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def private_services():
    """Private Redis and PostgreSQL for the whole session, the schema migrated once, an API key."""
    workdir = workdir_new()
    try:
        redis = PrivateRedis(workdir)
        postgres = PrivatePostgres(workdir)
    except ServiceUnavailable as exc:
        pytest.skip(f"fault suite: {exc}")
    redis.start()
    try:
        postgres.init()
        db_url = postgres.create_database("evalhub_faults")
        data_dir = workdir / "data"
        data_dir.mkdir()
        env = servers.child_env(DATABASE_URL=db_url, EVALHUB_DATA_DIR=str(data_dir))
        manage(env, "migrate", "--noinput", "-v", "0")
        api_key = manage(env, "createapikey", "faults").strip().splitlines()[-1]
        yield {"redis": redis, "postgres": postgres, "db_url": db_url, "api_key": api_key,
               "data_dir": data_dir}  # fmt: skip
    finally:
        redis.stop()
        postgres.destroy()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.call_failed = report.failed
    return report


@pytest.fixture
def stack(private_services, request):
    s = Stack(**private_services)
    yield s
    if getattr(request.node, "call_failed", False):
        # What the processes said and where the jobs stand: printed under the failure.
        print(s.report())
    s.close()


MEASURED: dict[str, object] = {}


@pytest.fixture
def measure():
    """Record a figure of the run (recovery times, losses); printed at the end of the session
    and written to $EVALHUB_DATA_DIR/faults-measurements.json."""

    def record(name: str, value: object) -> None:
        MEASURED[name] = value

    return record


def pytest_terminal_summary(terminalreporter):
    if not MEASURED:
        return
    from django.conf import settings

    terminalreporter.section("fault suite measurements")
    for name, value in sorted(MEASURED.items()):
        terminalreporter.write_line(f"{name}: {value}")
    path = Path(settings.DATA_DIR) / "faults-measurements.json"
    path.write_text(json.dumps(MEASURED, indent=2, default=str))


@pytest.fixture
def provider():
    """The fake LLM provider; `.url` for OPENAI_BASE_URL, `.received` what it served."""
    fake = FakeOpenAI()
    with servers.serve_asgi(fake) as base:
        fake.url = f"{base}/v1"
        yield fake
