"""Several web processes against one database (what `make run` and compose start with
EVALHUB_WEB_CONCURRENCY > 1): what each keeps in memory (token cache, budget totals, a
rollout's spending) never lets a call through that another process's calls have made
unauthorized."""

from __future__ import annotations

import datetime as dt

import openai
import pytest
from django.utils import timezone

from evalhub import runall
from tests.support import servers
from tests.traces.test_interceptor import MESSAGES, recorded, through

# Short cache lifetimes so the test does not wait long for what the other process did.
CACHES = {
    "EVALHUB_INTERCEPTOR_TOKEN_TTL_S": "0.2",
    "EVALHUB_INTERCEPTOR_BUDGET_REFRESH_S": "0.2",
    "EVALHUB_INTERCEPTOR_GRACE_S": "0",
}


@pytest.fixture
def two_webs(transactional_db, fake_upstream):
    """Two evalhub web processes on their own ports, the same database and provider."""
    started = [
        servers.start_web(OPENAI_BASE_URL=fake_upstream.url, OPENAI_API_KEY="sk-server", **CACHES)
        for _ in range(2)
    ]
    yield [base for _, base in started]
    for web, _ in started:
        web.stop()


def _status_of_call(base: str, token: str) -> int:
    try:
        through(base, token).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def test_a_budget_spent_through_one_process_is_refused_by_the_other(two_webs, make_rollout):
    web_a, web_b = two_webs
    rollout = make_rollout(max_tokens=1000)
    # Both processes have seen the job with nothing spent yet.
    assert _status_of_call(web_b, rollout.token) == 200
    recorded(rollout.attempt, 1)
    # The first call already spent 1,500 tokens: A's totals come from the database (B's call).
    servers.wait_until(lambda: _status_of_call(web_a, rollout.token) == 429, what="A to refuse")
    servers.wait_until(lambda: _status_of_call(web_b, rollout.token) == 429, what="B to refuse")
    assert _status_of_call(web_a, rollout.token) == 429
    assert _status_of_call(web_b, rollout.token) == 429


def test_a_spend_in_one_process_reaches_the_totals_of_the_other(two_webs, make_rollout):
    web_a, web_b = two_webs
    rollout = make_rollout(max_tokens=2000)  # one call (1,500 tokens) fits, the second spends it
    assert _status_of_call(web_a, rollout.token) == 200
    assert _status_of_call(web_b, rollout.token) == 200
    recorded(rollout.attempt, 2)
    # Each process counted one call itself; the other's shows up at its next refresh.
    for base in (web_a, web_b):
        servers.wait_until(lambda b=base: _status_of_call(b, rollout.token) == 429,
                           what="the budget spent over both processes to be refused")  # fmt: skip


def test_a_token_whose_attempt_ended_is_refused_by_every_process(two_webs, make_rollout):
    rollout = make_rollout()
    for base in two_webs:
        assert _status_of_call(base, rollout.token) == 200
    rollout.attempt.status = "succeeded"
    rollout.attempt.finished_at = timezone.now() - dt.timedelta(minutes=5)
    rollout.attempt.save(update_fields=["status", "finished_at"])
    for base in two_webs:
        servers.wait_until(lambda b=base: _status_of_call(b, rollout.token) == 410,
                           what="the ended token to be refused")  # fmt: skip


def test_max_llm_calls_holds_over_calls_spread_across_processes(two_webs, make_rollout):
    web_a, web_b = two_webs
    rollout = make_rollout(rollout_limits={"max_llm_calls": 3})
    # Alternating, each process alone would let three through.
    answers = [_status_of_call(two_webs[i % 2], rollout.token) for i in range(6)]
    assert answers == [200, 200, 200, 429, 429, 429]
    rollout.attempt.refresh_from_db()
    assert rollout.attempt.llm_calls_admitted == 3
    assert _status_of_call(web_a, rollout.token) == _status_of_call(web_b, rollout.token) == 429


def test_a_rollout_token_limit_counts_what_the_other_process_spent(two_webs, make_rollout):
    web_a, web_b = two_webs
    rollout = make_rollout(rollout_limits={"max_tokens": 2000})  # each call spends 1,500
    assert _status_of_call(web_a, rollout.token) == 200
    recorded(rollout.attempt, 1)
    assert _status_of_call(web_b, rollout.token) == 200  # 1,500 of 2,000 spent: one more
    recorded(rollout.attempt, 2)
    # 3,000 spent, half of it through B: A refuses at once, as B does.
    assert _status_of_call(web_a, rollout.token) == 429
    assert _status_of_call(web_b, rollout.token) == 429


def test_make_run_starts_the_configured_number_of_web_processes(settings):
    settings.EVALHUB_WEB_CONCURRENCY = 3
    web = runall.commands(settings)["web"]
    assert web[web.index("--workers") + 1] == "3"
