"""An ended rollout's URL is closed at once: when the worker ends an attempt, every web process
refuses its token (410) within a second, although each still holds the token in its cache
(EVALHUB_INTERCEPTOR_TOKEN_TTL_S, 5 s by default) and no call reads the database for it."""

from __future__ import annotations

import time

import openai
import pytest

from jobs.attempts import rollout_attempt_finish
from tests.support import servers
from tests.support.jobs import attempt_end
from tests.traces.conftest import SERVER_KEY
from tests.traces.test_interceptor import MESSAGES, through


@pytest.fixture
def two_webs(transactional_db, fake_upstream):
    """Two web processes with the default settings (grace 0, 5 s token cache) in front of the
    same fake provider."""
    webs = [
        servers.start_web(OPENAI_BASE_URL=fake_upstream.url, OPENAI_API_KEY=SERVER_KEY)
        for _ in range(2)
    ]
    yield [base for _, base in webs]
    for web, _ in webs:
        web.stop()


@pytest.mark.parametrize("status", ["succeeded", "cancelled"])
def test_an_ended_attempts_url_is_refused_by_every_web_process_within_a_second(
    two_webs, fake_upstream, make_rollout, status
):
    rollout = make_rollout()
    clients = [through(base, rollout.token) for base in two_webs]
    for client in clients:  # each process has now resolved and cached the token
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(fake_upstream.received) == 2

    rollout_attempt_finish(end=attempt_end(rollout.attempt.id, status))
    time.sleep(1.0)

    for client in clients:
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        assert caught.value.status_code == 410
        assert caught.value.body["type"] == "rollout_ended"
    assert len(fake_upstream.received) == 2, "no call of the ended attempt reached the provider"


def test_a_running_attempt_keeps_working_beside_an_ended_one(two_webs, fake_upstream, make_rollout):
    ended, running = make_rollout(), make_rollout()
    for base in two_webs:
        for rollout in (ended, running):
            through(base, rollout.token).chat.completions.create(
                model="gpt-4o-mini", messages=MESSAGES
            )
    rollout_attempt_finish(end=attempt_end(ended.attempt.id))
    time.sleep(1.0)
    for base in two_webs:
        answer = through(base, running.token).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES
        )
        assert answer.choices[0].message.content
    assert len(fake_upstream.received) == 6
