"""evalhub with its web process (API + interceptor, provider `openai` at the fake) and a real
worker, for the observability tests; the peers (Phoenix, Inspect) run from virtualenvs of
their own (`.venv-env/phoenix`, `.venv-env/inspect`, built from tests/support/env_venvs/)."""

from __future__ import annotations

import pytest

from jobs.apikeys import api_key_create_for_username
from tests.environments.conftest import SERVER_KEY, gym_server  # noqa: F401 - a fixture
from tests.support import servers
from tests.support.jobs import FAST


@pytest.fixture
def evalhub_factory(transactional_db, celery_queue, fake_upstream, worker_factory):
    """Start evalhub's web process and one worker with `env` (e.g. the OTEL_* variables);
    returns (base URL, auth headers, worker)."""
    webs: list[servers.ChildProcess] = []

    def start(**env: str):
        web, base = servers.start_web(
            EVALHUB_CELERY_QUEUE=celery_queue,
            OPENAI_BASE_URL=fake_upstream.url,
            OPENAI_API_KEY=SERVER_KEY,
            **env,
        )
        webs.append(web)
        worker = worker_factory(EVALHUB_PUBLIC_URL=base, EVALHUB_TRACES_ZIP_AFTER_S="0.5",
                                **FAST, **env)  # fmt: skip
        _, key = api_key_create_for_username(username=f"obs{len(webs)}")
        return base, {"Authorization": f"Bearer {key}"}, worker

    yield start
    for web in webs:
        web.stop()
