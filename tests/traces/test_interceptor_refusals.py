"""The interceptor's failures and refusals: provider errors and timeouts, cut streams, unknown
or ended tokens, spent budgets, oversized bodies, callers hanging up; and /models."""

from __future__ import annotations

import datetime as dt

import openai
import pytest
from django.utils import timezone

from evalhub.fakeprovider import stream_chunks
from tests.traces.conftest import MAX_REQUEST_BYTES
from tests.traces.test_interceptor import (
    GPT_4O_MINI,
    MESSAGES,
    direct,
    published_cost,
    recorded,
    through,
)
from traces.models import LLMCall
from traces.results.totals import seed_usage


@pytest.mark.parametrize("status", [400, 429, 500, 503])
def test_provider_errors_reach_the_caller_with_their_status_and_are_recorded(
    interceptor_web, make_rollout, status
):
    rollout = make_rollout()
    with pytest.raises(openai.APIStatusError) as caught:
        through(interceptor_web, rollout.token).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": {"error_status": status}}
        )
    assert caught.value.status_code == status
    assert caught.value.body["message"] == f"fake upstream error {status}"
    (call,) = recorded(rollout.attempt)
    assert call.http_status == status
    assert f"fake upstream error {status}" in call.error
    assert call.total_tokens == 0 and call.cost_usd == 0.0


def test_a_non_json_provider_error_becomes_an_openai_style_error(interceptor_web, make_rollout):
    rollout = make_rollout()
    with pytest.raises(openai.APIStatusError) as caught:
        through(interceptor_web, rollout.token).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": {"html_error": True}}
        )
    assert caught.value.status_code == 502
    assert caught.value.body["type"] == "upstream_error"
    (call,) = recorded(rollout.attempt)
    assert call.http_status == 502 and "Bad gateway" in call.error


def test_a_provider_timeout_is_a_504_and_recorded(interceptor_web, make_rollout):
    rollout = make_rollout()
    with pytest.raises(openai.APIStatusError) as caught:
        through(interceptor_web, rollout.token).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": {"delay_s": 4}}
        )
    assert caught.value.status_code == 504
    assert caught.value.body["type"] == "upstream_timeout"
    (call,) = recorded(rollout.attempt)
    assert call.http_status == 504 and "upstream_timeout" in call.error


def test_a_stream_cut_midway_ends_with_an_error_event_and_is_recorded(
    interceptor_web, make_rollout
):
    rollout = make_rollout()
    received = []
    with pytest.raises(openai.APIError, match="broke off"):
        for chunk in through(interceptor_web, rollout.token).chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            stream=True,
            extra_body={"fake": {"cut_after": 3}},
        ):
            received.append(chunk)
    assert len(received) == 3
    (call,) = recorded(rollout.attempt)
    assert call.http_status == 502
    assert call.error.startswith("stream_interrupted")
    # The words that did arrive were paid for: estimated, since the usage chunk never came.
    assert call.usage_estimated and call.completion_tokens > 0


def test_an_unknown_token_is_refused_and_nothing_is_forwarded(interceptor_web, fake_upstream):
    client = through(interceptor_web, "not-a-token-of-ours")
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert caught.value.body["type"] == "invalid_token"
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert fake_upstream.received == []


def test_an_ended_rollouts_url_forwards_nothing(interceptor_web, fake_upstream, make_rollout):
    ended = make_rollout(status="succeeded", finished_at=timezone.now() - dt.timedelta(hours=1))
    with pytest.raises(openai.APIStatusError) as caught:
        through(interceptor_web, ended.token).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES
        )
    assert caught.value.status_code == 410
    assert caught.value.body["type"] == "rollout_ended"
    assert fake_upstream.received == []
    assert not LLMCall.objects.exists()


def test_an_attempt_stops_forwarding_once_it_ends_past_the_grace_period(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    # Just finished: still inside the grace period, late calls of the rollout go through.
    rollout.attempt.status = "succeeded"
    rollout.attempt.finished_at = timezone.now()
    rollout.attempt.save(update_fields=["status", "finished_at"])
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    rollout.attempt.finished_at = timezone.now() - dt.timedelta(minutes=5)
    rollout.attempt.save(update_fields=["finished_at"])
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert caught.value.status_code == 410
    assert len(fake_upstream.received) == 2


def test_a_spent_token_budget_answers_429_and_forwards_nothing(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout(max_tokens=1000)
    client = through(interceptor_web, rollout.token)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # 1500 tokens
    recorded(rollout.attempt)

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert caught.value.body["type"] == "budget_exceeded"
    assert "budget is spent" in caught.value.body["message"]
    assert len(fake_upstream.received) == 1
    first, refused = recorded(rollout.attempt, 2)
    assert refused.http_status == 429 and refused.error.startswith("budget_exceeded")
    assert refused.refusal == "budget_exceeded"
    assert refused.total_tokens == 0 and refused.cost_usd == 0.0


def test_a_spent_cost_budget_answers_429(interceptor_web, fake_upstream, make_rollout):
    rollout = make_rollout(max_cost_usd=0.0005)
    client = through(interceptor_web, rollout.token)
    fake = {"prompt_tokens": 1000, "completion_tokens": 1000}  # $0.00075 on gpt-4o-mini
    client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": fake}
    )
    recorded(rollout.attempt)
    with pytest.raises(openai.RateLimitError, match="budget is spent"):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, extra_body={"fake": fake}
        )
    assert len(fake_upstream.received) == 1


def test_a_body_over_the_size_limit_is_413_and_not_forwarded(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    huge = [{"role": "user", "content": "x" * MAX_REQUEST_BYTES}]
    with pytest.raises(openai.APIStatusError) as caught:
        through(interceptor_web, rollout.token).chat.completions.create(
            model="gpt-4o-mini", messages=huge
        )
    assert caught.value.status_code == 413
    assert fake_upstream.received == []


def test_models_lists_the_providers_models(interceptor_web, fake_upstream, make_rollout):
    rollout = make_rollout()
    got = [m.id for m in through(interceptor_web, rollout.token).models.list()]
    assert got == [m.id for m in direct(fake_upstream).models.list()]
    assert "gpt-4o-mini" in got


def test_a_seeds_tokens_and_cost_are_the_sums_over_its_calls(interceptor_web, make_rollout):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    a = {"prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 500}
    b = {"prompt_tokens": 3000, "completion_tokens": 20}
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": a})
    list(
        client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, extra_body={"fake": b}
        )
    )
    recorded(rollout.attempt, 2)
    usage = seed_usage(job=rollout.job)[rollout.attempt.seed_run_id]
    assert usage.total_tokens == 1100 + 3020
    assert usage.cost_usd == pytest.approx(
        published_cost(GPT_4O_MINI, prompt=1000, completion=100, cached=500)
        + published_cost(GPT_4O_MINI, prompt=3000, completion=20),
        rel=1e-9,
    )
    assert usage.num_llm_calls == 2


def test_a_caller_hanging_up_midway_stops_the_provider_stream_and_is_recorded(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    stream = through(interceptor_web, rollout.token).chat.completions.create(
        model="gpt-4o-mini",
        messages=MESSAGES,
        stream=True,
        extra_body={"fake": {"chunk_delay_s": 0.3}},
    )
    next(iter(stream))
    stream.close()
    (call,) = recorded(rollout.attempt)
    assert call.error.startswith("client_disconnected")
    whole = stream_chunks({"messages": MESSAGES, "stream_options": {"include_usage": True}})
    assert fake_upstream.chunks_sent < len(whole)
