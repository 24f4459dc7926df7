"""Per-rollout limits (`rollout_limits` on the job): once a rollout reaches one, its further
calls get 429 rollout_limit_exceeded naming the limit, nothing reaches the provider, and the
seed's result row says which limit stopped it. The overshoot is at most the calls in flight."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.support.jobs import FAST, job_create, job_wait
from tests.support.servers import serve_asgi
from tests.support.task_app import task_app_create
from tests.traces.test_interceptor import GPT_4O_MINI, MESSAGES, published_cost, recorded, through
from traces.models import LLMCall
from traces.results.result_rows import job_results

# Each call of the fake spends 1200 + 300 tokens by default.
CALL_TOKENS = 1500
CALL_COST = published_cost(GPT_4O_MINI, prompt=1200, completion=300)


def call_until_refused(client, n: int) -> tuple[int, openai.APIStatusError | None]:
    """(calls answered, the first refusal) of n calls made one after another."""
    for i in range(n):
        try:
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        except openai.APIStatusError as exc:
            return i, exc
    return n, None


def spent_and_result(rollout):
    calls = LLMCall.objects.filter(attempt=rollout.attempt, http_status=200)
    tokens = sum(c.total_tokens for c in calls)
    cost = sum(c.cost_usd for c in calls)
    _, rows = job_results(job=rollout.job)
    return calls.count(), tokens, cost, rows[0]


@pytest.mark.parametrize(
    ("limits", "answered", "limit"),
    [
        ({"max_llm_calls": 3}, 3, "max_llm_calls"),
        ({"max_tokens": 2 * CALL_TOKENS}, 2, "max_tokens"),
        # Three calls cross $0.001; the fourth is refused.
        ({"max_cost_usd": 0.001}, 3, "max_cost_usd"),
    ],
)
def test_a_rollout_stops_at_its_limit_and_its_result_says_which(
    wire, make_rollout, limits, answered, limit
):
    rollout = make_rollout(rollout_limits=limits)
    client = through(wire.base, rollout.token)

    got, refusal = call_until_refused(client, 6)

    assert got == answered
    assert refusal.status_code == 429
    assert refusal.body["type"] == "rollout_limit_exceeded" and limit in refusal.body["message"]
    with pytest.raises(openai.RateLimitError):  # and it stays refused
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(wire.openai.received) == answered, "no refused call reached the provider"
    recorded(rollout.attempt, answered + 2)
    calls, tokens, cost, row = spent_and_result(rollout)
    assert (calls, tokens) == (answered, answered * CALL_TOKENS)
    assert cost == pytest.approx(answered * CALL_COST)
    assert row["rollout_limit"] == limit
    assert row["num_llm_calls"] == answered + 2


def test_the_overshoot_is_at_most_the_calls_in_flight(wire, make_rollout):
    limit = CALL_TOKENS  # one call's worth
    rollout = make_rollout(rollout_limits={"max_tokens": limit})
    client = through(wire.base, rollout.token)
    in_flight = 8

    def slow_call(_):
        try:
            client.chat.completions.create(
                model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": {"delay_s": 0.5}}
            )
            return True
        except openai.RateLimitError:
            return False

    with ThreadPoolExecutor(in_flight) as pool:
        forwarded = sum(pool.map(slow_call, range(in_flight)))
    recorded(rollout.attempt, in_flight)
    got, refusal = call_until_refused(client, 1)

    assert got == 0 and refusal.body["type"] == "rollout_limit_exceeded"
    recorded(rollout.attempt, in_flight + 1)  # the refusal's record too
    _, tokens, _, row = spent_and_result(rollout)
    overshoot = tokens - limit
    print(f"max_tokens {limit}: {forwarded} of {in_flight} concurrent calls forwarded, "
          f"{tokens} tokens spent, overshoot {overshoot} ({overshoot // CALL_TOKENS} calls)")  # fmt: skip
    assert len(wire.openai.received) == forwarded
    assert overshoot <= (in_flight - 1) * CALL_TOKENS
    assert row["rollout_limit"] == "max_tokens"


def test_bad_rollout_limits_are_refused_naming_the_field(client_alice):
    for limits, word in (({"max_calls": 3}, "unknown"), ({"max_tokens": 0}, "max_tokens"),
                         ({"max_llm_calls": 1.5}, "max_llm_calls")):  # fmt: skip
        resp = client_alice.post(
            "/api/eval/jobs",
            {"task_app_url": "http://127.0.0.1:9/", "seeds": [1], "rollout_limits": limits},
            format="json",
        )
        assert resp.status_code == 400
        assert "rollout_limits" in resp.json()["detail"] or "rollout_limits" in str(resp.json())
        assert word in str(resp.json())


def test_a_job_run_by_a_worker_says_which_limit_stopped_each_sample(
    wire, client_alice, worker_factory
):
    app, state = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(EVALHUB_PUBLIC_URL=wire.base, **FAST)
        job_id = job_create(
            client_alice, url, seeds=[0, 1], env_config={"call_llm": "until_refused"},
            rollout_limits={"max_llm_calls": 3},
        )  # fmt: skip
        job = job_wait(job_id)

    assert job.status == "completed"
    refusals = [a for a in state.llm_answers if a["status"] != 200]
    assert len(refusals) == 2 and len(state.llm_answers) == 8
    assert all(r["body"]["error"]["type"] == "rollout_limit_exceeded" for r in refusals)
    assert len(wire.openai.received) == 6
    rows = client_alice.get(f"/api/eval/jobs/{job_id}/results").json()["results"]
    assert [(r["seed"], r["rollout_limit"], r["num_llm_calls"]) for r in rows] == [
        (0, "max_llm_calls", 4), (1, "max_llm_calls", 4)
    ]  # fmt: skip
    config = client_alice.get(f"/api/eval/jobs/{job_id}").json()["config"]
    assert config["rollout_limits"] == {"max_llm_calls": 3}
