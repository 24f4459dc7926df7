"""Replays (docs/replay.md) end to end: a job run by a real worker against the test task app,
whose LLM calls are made with the real `openai` and `anthropic` SDKs through evalhub's
interceptor to the fake providers, then replayed: answered from the recording, or diverging."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from jobs.apikeys import api_key_create_for_username
from jobs.models import SeedRun
from tests.support import servers
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.jobs import FAST, JOBS, api_job_wait, job_body
from tests.support.task_app import task_app_create
from traces.models import CallState, LLMCall, ReplayMark

pytestmark = [
    pytest.mark.worker,
    # The SDK warns of the model's end of life; replaying it is what is under test.
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

CLAUDE = {"model": "claude-sonnet-4-5", "provider": "claude"}


@pytest.fixture(scope="module")
def fake_claude():
    fake = FakeAnthropic()
    with servers.serve_asgi(fake) as base:
        fake.url = base
        yield fake


@pytest.fixture(scope="module")
def replay_web(django_db_setup, django_db_blocker, celery_queue, fake_upstream_server, fake_claude):
    claude = {"kind": "anthropic", "base_url": fake_claude.url, "api_key_env": "CLAUDE_KEY"}
    with django_db_blocker.unblock():
        web, base = servers.start_web(
            EVALHUB_CELERY_QUEUE=celery_queue,
            OPENAI_BASE_URL=fake_upstream_server.url,
            OPENAI_API_KEY="sk-replay-provider-secret",
            CLAUDE_KEY="sk-ant-replay-secret",
            EVALHUB_PROVIDERS=json.dumps({"claude": claude}),
        )
    yield base
    web.stop()


class Stack:
    def __init__(self, base: str, key: str):
        self.base, self.headers = base, {"Authorization": f"Bearer {key}"}

    def post(self, path: str, body: dict) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", json=body, headers=self.headers, timeout=30)

    def run(self, path: str, body: dict) -> tuple[str, dict]:
        """POST a job (or a replay), wait for its end: its id and results."""
        created = self.post(path, body)
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        api_job_wait(self.base, self.headers, job_id, timeout=90)
        return job_id, self.results(job_id)

    def results(self, job_id: str) -> dict:
        """The job's results once its calls are all saved: the interceptor saves each a moment
        after answering it, so the job may end first."""

        def settled():
            first = self.get(f"{JOBS}/{job_id}/results")
            time.sleep(0.3)
            calls = LLMCall.objects.filter(attempt__seed_run__job_id=job_id)
            in_flight = calls.filter(state=CallState.IN_FLIGHT).exists()
            second = self.get(f"{JOBS}/{job_id}/results")
            return second if first == second and not in_flight else None

        return servers.wait_until(settled, timeout=30, what=f"the calls of {job_id} saved")

    def get(self, path: str) -> dict:
        return httpx.get(f"{self.base}{path}", headers=self.headers, timeout=30).json()


@pytest.fixture
def stack(transactional_db, replay_web, fake_upstream, fake_claude, worker_factory):
    fake_claude.received.clear()
    worker_factory(EVALHUB_PUBLIC_URL=replay_web, **FAST)
    _, key = api_key_create_for_username(username="alice")
    return Stack(replay_web, key)


def samples(job_id: str) -> dict[tuple[int, int], SeedRun]:
    return {(s.seed, s.repeat): s for s in SeedRun.objects.filter(job_id=job_id)}


def calls_of(job_id: str) -> dict[tuple[int, int], list[LLMCall]]:
    found: dict[tuple[int, int], list[LLMCall]] = {}
    calls = LLMCall.objects.filter(attempt__seed_run__job_id=job_id).select_related(
        "attempt__seed_run"
    )
    for call in calls.order_by("attempt__seed_run__seed", "attempt__seed_run__repeat", "seq"):
        found.setdefault((call.attempt.seed_run.seed, call.attempt.seed_run.repeat), []).append(
            call
        )
    return found


def rows_by_sample(results: dict) -> dict[tuple[int, int], dict]:
    return {(r["seed"], r["repeat"]): r for r in results["results"]}


def mark_each_repeat(job_id: str) -> None:
    """Make the recorded last answer of every sample its own: '(seed s, repeat r)' appended."""
    for (seed, repeat), calls in calls_of(job_id).items():
        last = calls[-1]
        message = last.response["choices"][0]["message"]
        message["content"] += f" (seed {seed}, repeat {repeat})"
        last.save(update_fields=["response"])


def test_a_replayed_job_reaches_no_provider_and_equals_the_original_repeat_by_repeat(
    stack, fake_upstream
):
    app, _ = task_app_create()
    with servers.serve_asgi(app) as url:
        body = job_body(url, seeds=[0, 1, 2], repeats=2, env_config={"call_llm": "chat"})
        original, before = stack.run(JOBS, body)
        assert before["summary"]["num_successful"] == 6 and before["summary"]["total_cost_usd"] > 0
        mark_each_repeat(original)
        fake_upstream.reset()
        replay, after = stack.run(JOBS, {**body, "replay": {"job_id": original, "on_miss": "fail"}})
    assert fake_upstream.received == []
    rows, was = rows_by_sample(after), rows_by_sample(before)
    for key, row in rows.items():
        assert row["status"] == "succeeded", row
        for field in ("score", "tokens", "num_llm_calls"):
            assert row[field] == was[key][field], (key, field)
        assert (row["replayed_calls"], row["live_calls"], row["divergences"]) == (2, 0, 0)
        assert row["cost_usd"] == 0
        assert row["replayed_cost_usd"] == pytest.approx(was[key]["cost_usd"])
    summary = after["summary"]
    assert (
        summary["total_cost_usd"] == 0
        and summary["total_tokens"] == before["summary"]["total_tokens"]
    )
    assert summary["replayed_cost_usd"] == pytest.approx(before["summary"]["total_cost_usd"])
    assert (summary["replayed_calls"], summary["live_calls"], summary["divergences"]) == (12, 0, 0)
    # The transcripts: the same requests, the recorded answers, each repeat its own.
    recorded, replayed = calls_of(original), calls_of(replay)
    for key, calls in replayed.items():
        assert [c.request for c in calls] == [c.request for c in recorded[key]]
        assert [c.response for c in calls] == [c.response for c in recorded[key]]
        assert all(c.replay == ReplayMark.REPLAYED for c in calls)
    for (seed, repeat), sample in samples(replay).items():
        said = sample.task_trace["answers"][-1]
        assert said.endswith(f"(seed {seed}, repeat {repeat})"), said
    status = httpx.get(f"{stack.base}{JOBS}/{replay}", headers=stack.headers, timeout=30).json()
    assert status["config"]["replay_of"] == original
    seed = httpx.get(f"{stack.base}{JOBS}/{replay}/seeds/2?repeat=1", headers=stack.headers)
    traced = seed.json()["trace"]["llm_calls"]
    assert [(c["replay"], c["cost_usd"]) for c in traced] == [("replayed", 0.0)] * 2
    assert all(c["replayed_cost_usd"] > 0 for c in traced)


def chat_calls(fake) -> list[dict]:
    return [r for r in fake.received if r["path"].endswith("/chat/completions")]


@pytest.fixture
def recorded_chat(stack, fake_upstream):
    """A job of three seeds, two chat turns each, and the task app it ran on (still served)."""
    app, _ = task_app_create()
    with servers.serve_asgi(app) as url:
        body = job_body(url, seeds=[0, 1, 2], env_config={"call_llm": "chat"})
        original, results = stack.run(JOBS, body)
        assert results["summary"]["num_successful"] == 3
        fake_upstream.reset()
        yield original, results


CHANGED = {"call_llm": "chat", "follow_ups": {"1": "Now add 2 to that."}}


def test_a_changed_prompt_fails_its_sample_with_a_divergence_report(
    stack, recorded_chat, fake_upstream
):
    original, _ = recorded_chat
    replay, after = stack.run(f"{JOBS}/{original}/replay", {"env_config": CHANGED})
    assert chat_calls(fake_upstream) == []
    rows = rows_by_sample(after)
    assert rows[(0, 0)]["status"] == rows[(2, 0)]["status"] == "succeeded"
    failed = rows[(1, 0)]
    assert failed["status"] == "failed" and failed["attempts"] == 1
    assert failed["error"].startswith("replay diverged at call 2 of seed 1 repeat 0: ")
    assert (
        "$.messages[2].content was Now add 1 to that., is now Now add 2 to that."
        in (failed["error"])
    )
    assert (failed["replayed_calls"], failed["live_calls"], failed["divergences"]) == (1, 0, 1)
    # The SDK got a 422 and did not try it again: one refused call.
    refused = [c for c in calls_of(replay)[(1, 0)] if c.replay == ReplayMark.REFUSED]
    assert len(refused) == 1 and refused[0].http_status == 422
    report = SeedRun.objects.get(job_id=replay, seed=1).rollout_attempts.get().replay_divergence
    assert (report["call"], report["path"]) == (2, "$.messages[2].content")
    assert (report["recorded"], report["now"]) == ("Now add 1 to that.", "Now add 2 to that.")
    assert after["summary"]["divergences"] == 1 and after["summary"]["total_cost_usd"] == 0


def test_with_on_miss_call_only_the_divergent_calls_reach_the_provider(
    stack, recorded_chat, fake_upstream
):
    original, before = recorded_chat
    replay, after = stack.run(
        f"{JOBS}/{original}/replay", {"env_config": CHANGED, "on_miss": "call"}
    )
    (live,) = chat_calls(fake_upstream)
    assert live["body"]["messages"][-1]["content"] == "Now add 2 to that."
    rows = rows_by_sample(after)
    assert all(row["status"] == "succeeded" for row in rows.values())
    assert (rows[(1, 0)]["replayed_calls"], rows[(1, 0)]["live_calls"]) == (1, 1)
    assert rows[(1, 0)]["divergences"] == 1 and rows[(1, 0)]["cost_usd"] > 0
    assert (rows[(0, 0)]["live_calls"], rows[(0, 0)]["cost_usd"]) == (0, 0)
    summary = after["summary"]
    assert (summary["replayed_calls"], summary["live_calls"], summary["divergences"]) == (5, 1, 1)
    assert summary["total_cost_usd"] == pytest.approx(rows[(1, 0)]["cost_usd"])
    marks = [c.replay for c in calls_of(replay)[(1, 0)]]
    assert marks == [ReplayMark.REPLAYED, ReplayMark.LIVE]


def as_text(answer) -> str:
    """An answer as the SDK read it, keys in order (PostgreSQL's jsonb keeps them its own way)."""
    return json.dumps(answer, sort_keys=True)


@pytest.mark.parametrize(
    ("env_config", "policy"),
    [
        ({"call_llm": "chat", "stream": True}, None),
        ({"call_llm": "responses"}, None),
        ({"call_llm": "messages"}, CLAUDE),
    ],
    ids=["chat-streamed", "responses", "messages"],
)
def test_streams_and_every_wire_format_replay_through_the_real_sdks(
    stack, fake_upstream, fake_claude, env_config, policy
):
    app, state = task_app_create()
    with servers.serve_asgi(app) as url:
        body = job_body(
            url, seeds=[3, 4], env_config=env_config, **({"policy": policy} if policy else {})
        )
        original, before = stack.run(JOBS, body)
        assert before["summary"]["num_successful"] == 2, before["results"]
        heard = sorted(map(as_text, state.llm_answers))
        state.llm_answers.clear()
        fake_upstream.reset()
        fake_claude.received.clear()
        replay, after = stack.run(f"{JOBS}/{original}/replay", {})
    assert fake_upstream.received == [] and fake_claude.received == []
    assert after["summary"]["num_successful"] == 2, after["results"]
    assert sorted(map(as_text, state.llm_answers)) == heard
    assert after["summary"]["total_tokens"] == before["summary"]["total_tokens"]
    recorded, replayed = calls_of(original), calls_of(replay)
    for key, calls in replayed.items():
        assert [c.response for c in calls] == [c.response for c in recorded[key]]
        assert [c.stream for c in calls] == [c.stream for c in recorded[key]]
    assert any(c.stream for calls in replayed.values() for c in calls)


def test_a_cache_answers_identical_calls_of_the_account_never_another_accounts_or_repeats(
    stack, fake_upstream
):
    _, bob_key = api_key_create_for_username(username="bob")
    bob = Stack(stack.base, bob_key)
    app, _ = task_app_create()
    with servers.serve_asgi(app) as url:
        body = job_body(url, seeds=[0, 1], env_config={"call_llm": "chat"},
                        cache={"scope": "account"})  # fmt: skip
        first, live = stack.run(JOBS, body)
        assert len(chat_calls(fake_upstream)) == 4
        assert (live["summary"]["live_calls"], live["summary"]["replayed_calls"]) == (4, 0)
        fake_upstream.reset()
        again, cached = stack.run(JOBS, body)
        assert chat_calls(fake_upstream) == []
        summary = cached["summary"]
        assert (summary["replayed_calls"], summary["live_calls"], summary["total_cost_usd"]) == (
            4, 0, 0)  # fmt: skip
        assert summary["replayed_cost_usd"] == pytest.approx(live["summary"]["total_cost_usd"])
        assert summary["total_tokens"] == live["summary"]["total_tokens"]
        assert [r["score"] for r in cached["results"]] == [r["score"] for r in live["results"]]
        bob.run(JOBS, body)  # never another account's answers
        assert len(chat_calls(fake_upstream)) == 4
        fake_upstream.reset()
        _, repeated = stack.run(JOBS, {**body, "repeats": 2})  # repeat 1 has no answers yet
        assert len(chat_calls(fake_upstream)) == 4
        rows = rows_by_sample(repeated)
        assert [rows[(s, 0)]["replayed_calls"] for s in (0, 1)] == [2, 2]
        assert [rows[(s, 1)]["live_calls"] for s in (0, 1)] == [2, 2]
        fake_upstream.reset()
        stack.run(JOBS, {**body, "cache": {"scope": "job"}})  # this job's own answers only
        assert len(chat_calls(fake_upstream)) == 4
