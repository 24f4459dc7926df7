"""Riding out a provider's bad moments: retries after `retry-after` (each try recorded, only the
answer billed), a fallback provider when the first is down, and rpm queueing. The caller sees
one answer."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from django.utils import timezone

from evalhub import revocations
from jobs.models import RolloutAttempt
from tests.support import servers
from tests.traces.test_interceptor import GPT_4O_MINI, MESSAGES, published_cost, recorded, through
from tests.traces.test_messages_route import MESSAGES as CLAUDE_MESSAGES
from tests.traces.test_messages_route import MODEL as CLAUDE_MODEL
from tests.traces.test_messages_route import claude
from traces.models import RETRIED_MARK
from traces.results.totals import seed_usage

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
ONE_CALL = published_cost(GPT_4O_MINI, prompt=1200, completion=300)


def test_429_twice_with_retry_after_then_200_is_one_answer_billed_once(wire, make_rollout):
    rollout = make_rollout()
    fake = {"fail_times": 2, "retry_after": 1, "fail_key": uuid.uuid4().hex}
    started = time.monotonic()

    answer = through(wire.base, rollout.token).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": fake}
    )

    waited = time.monotonic() - started
    assert answer.choices[0].message.content
    assert len(wire.openai.received) == 3
    assert waited >= 2.0, "each retry waited the provider's retry-after (1 s)"
    first, second, ok = recorded(rollout.attempt, 3)
    for failed in (first, second):
        assert failed.http_status == 429 and RETRIED_MARK in failed.error
        assert failed.total_tokens == 0 and failed.cost_usd == 0.0
    assert ok.http_status == 200 and ok.error is None
    assert ok.cost_usd == pytest.approx(ONE_CALL)
    (usage,) = seed_usage(job=rollout.job).values()
    assert usage.cost_usd == pytest.approx(ONE_CALL) and usage.total_tokens == 1500


def test_an_overloaded_anthropic_provider_is_tried_again(wire, make_rollout):
    rollout = make_rollout(provider="claude")
    fake = {"fail_times": 1, "fail_status": 529, "fail_key": uuid.uuid4().hex}
    message = claude(wire.base, rollout.token).messages.create(
        model=CLAUDE_MODEL, max_tokens=64, messages=CLAUDE_MESSAGES, extra_body={"fake": fake}
    )
    assert message.type == "message"
    failed, ok = recorded(rollout.attempt, 2)
    assert failed.http_status == 529 and failed.cost_usd == 0.0
    assert ok.http_status == 200 and ok.prompt_tokens == 900
    assert len(wire.anthropic.received) == 2


def test_a_provider_that_is_down_falls_back(wire, make_rollout):
    rollout = make_rollout(provider="down")  # nothing listens; max_retries 1, fallback openai
    answer = through(wire.base, rollout.token).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES
    )
    assert answer.choices[0].message.content
    *failed, ok = recorded(rollout.attempt, 3)
    assert [(c.provider, c.http_status) for c in failed] == [("down", 502), ("down", 502)]
    assert all("upstream_unreachable" in c.error and c.cost_usd == 0.0 for c in failed)
    assert (ok.provider, ok.http_status) == ("openai", 200)
    assert ok.cost_usd == pytest.approx(ONE_CALL)
    assert len(wire.openai.received) == 1


def test_calls_over_a_providers_rpm_wait_their_turn(wire, make_rollout):
    # `fast` is an alias of gpt-4o-mini at provider fast-openai, rpm 60: one call a second.
    rollout = make_rollout()
    client = through(wire.base, rollout.token)

    def call(_):
        return client.chat.completions.create(model="fast", messages=MESSAGES)

    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(call, range(3)))

    assert all(a.choices[0].message.content for a in answers), "none was refused"
    arrivals = sorted(r["at"] for r in wire.openai.received)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert len(arrivals) == 3 and all(gap >= 0.9 for gap in gaps), gaps


def test_calls_waiting_their_turn_when_the_rollout_ends_never_reach_the_provider(
    wire, make_rollout
):
    """Three calls at once behind an rpm of 60: the first goes out, the others wait their turn
    (a second, two). The rollout ends meanwhile (its worker pushes the end and writes it): as
    their turn comes the interceptor looks again, so they are refused (410, no retry by the
    SDK) and never reach the provider, their rows kept as refused."""
    rollout = make_rollout()
    client = through(wire.base, rollout.token)

    def call(_):
        try:
            return client.chat.completions.create(model="fast", messages=MESSAGES)
        except openai.APIStatusError as exc:
            return exc.status_code

    with ThreadPoolExecutor(3) as pool:
        answers = pool.map(call, range(3))
        servers.wait_until(lambda: len(wire.openai.received) == 1, what="the first call out")
        RolloutAttempt.objects.filter(pk=rollout.attempt.pk).update(
            status="succeeded", finished_at=timezone.now()
        )
        revocations.publish([rollout.attempt.pk])
        answers = list(answers)

    assert sorted(a if isinstance(a, int) else 200 for a in answers) == [200, 410, 410]
    time.sleep(2.5)  # the last turn, had it been taken
    assert len(wire.openai.received) == 1
    calls = recorded(rollout.attempt, 3)
    assert sorted(c.http_status for c in calls) == [200, 410, 410]
    for refused in (c for c in calls if c.http_status == 410):
        assert refused.state == "done" and refused.error.startswith("rollout_ended")
        assert refused.cost_usd == 0.0 and not refused.total_tokens
