"""Browser fixtures: Debian's Chromium driven by Playwright against a real uvicorn web process.

Playwright never downloads a browser here: it launches /usr/bin/chromium, and without it the
browser tests are skipped with that reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import servers
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, PASSWORD

# The provider key the web process holds; the fake upstream accepts any.
PROVIDER_KEY = "sk-dashboard-provider-secret-41c7"


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    return CHROMIUM


@pytest.fixture(scope="module")
def dashboard_web(django_db_setup, django_db_blocker, celery_queue, fake_upstream_server):
    """The web process the browser talks to, once per module; it is also the interceptor the
    task apps call: its `openai` provider is the fake upstream."""
    with django_db_blocker.unblock():
        web, base = servers.start_web(
            EVALHUB_CELERY_QUEUE=celery_queue,
            OPENAI_BASE_URL=fake_upstream_server.url,
            OPENAI_API_KEY=PROVIDER_KEY,
        )
    yield base
    web.stop()


@pytest.fixture
def web_server(transactional_db, dashboard_web, fake_upstream):
    """The module's dashboard web process (`dashboard_web`). Workers must be started with
    `EVALHUB_PUBLIC_URL=web_server` so the inference URLs they hand out point here."""
    return dashboard_web


@pytest.fixture
def dashboard_user(transactional_db, django_user_model):
    return django_user_model.objects.create_user(username="alice", password=PASSWORD)


@pytest.fixture
def page(chromium, web_server, dashboard_user, celery_queue):
    """A signed-out browser tab at 1280x800 whose relative URLs go to the web process.
    Function-scoped: the browser stops before the test database is flushed."""
    from playwright.sync_api import expect, sync_playwright

    # The pages poll every 2 s; leave room for a slow machine.
    expect.set_options(timeout=15_000)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        context = browser.new_context(base_url=web_server, viewport=DESKTOP, accept_downloads=True)
        context.set_default_timeout(15_000)
        tab = context.new_page()
        try:
            yield tab
        finally:
            context.close()
            browser.close()
