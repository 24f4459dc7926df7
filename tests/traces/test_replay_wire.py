"""Replayed calls through the interceptor (traces/interceptor/replaying.py) with the real
`openai` and `anthropic` SDKs: text completions (plain and streamed) and embeddings answered
from a recording as the provider answered them, and a miss that the SDKs raise at once."""

from __future__ import annotations

import anthropic
import openai
import pytest

from jobs.models import AttemptStatus
from tests.traces.test_interceptor import CALLER_KEY, recorded
from tests.traces.test_messages_route import MESSAGES, MODEL, claude
from traces.models import ReplayMark

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


def client(base: str, token: str) -> openai.OpenAI:
    # The SDK's own retries stay on: a miss must not be tried again.
    return openai.OpenAI(base_url=f"{base}/api/interceptor/v1/{token}", api_key=CALLER_KEY)


def recording_of(make_rollout, n: int, calls) -> object:
    """An ended job whose sample (seed 7) made `calls(token)`: its rollout."""
    original = make_rollout(provider=calls.provider)
    said = calls(original.token)
    recorded(original.attempt, n)
    original.attempt.status = AttemptStatus.SUCCEEDED
    original.attempt.save(update_fields=["status"])
    original.job.status = "completed"
    original.job.save(update_fields=["status"])
    original.said = said
    return original


def openai_calls(base: str):
    def calls(token: str) -> list:
        llm = client(base, token)
        plain = llm.completions.create(model="gpt-3.5-turbo-instruct", prompt="2 + 2 =")
        streamed = llm.completions.create(model="gpt-3.5-turbo-instruct", prompt="3 + 4 =",
                                          stream=True)  # fmt: skip
        vectors = llm.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
        return [plain.choices[0].text, "".join(c.choices[0].text for c in streamed if c.choices),
                [e.embedding for e in vectors.data], vectors.usage.prompt_tokens]  # fmt: skip

    calls.provider = "openai"
    return calls


def test_text_completions_and_embeddings_are_answered_from_the_recording(wire, make_rollout):
    calls = openai_calls(wire.base)
    original = recording_of(make_rollout, 3, calls)
    reached = len(wire.openai.received)
    replay = make_rollout(replay_of=original.job, replay_on_miss="fail")

    assert calls(replay.token) == original.said
    assert len(wire.openai.received) == reached
    replayed = recorded(replay.attempt, 3)
    assert [c.replay for c in replayed] == [ReplayMark.REPLAYED] * 3
    was = recorded(original.attempt, 3)
    assert [c.response for c in replayed] == [c.response for c in was]
    assert [c.total_tokens for c in replayed] == [c.total_tokens for c in was]
    assert [c.cost_usd for c in replayed] == [0.0] * 3


def test_a_miss_is_raised_by_the_sdks_at_once_and_kept_as_the_attempts_divergence(
    wire, make_rollout
):
    calls = openai_calls(wire.base)
    original = recording_of(make_rollout, 3, calls)
    reached = len(wire.openai.received)
    replay = make_rollout(replay_of=original.job, replay_on_miss="fail")

    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client(wire.base, replay.token).completions.create(
            model="gpt-3.5-turbo-instruct", prompt="2 + 3 ="
        )
    assert caught.value.body["type"] == "replay_divergence"
    assert "call 1 of seed 7 repeat 0: $.prompt was 2 + 2 =, is now 2 + 3 =" in str(caught.value)
    (refused,) = recorded(replay.attempt, 1)  # the SDK did not try it again
    assert (refused.replay, refused.http_status) == (ReplayMark.REFUSED, 422)
    assert len(wire.openai.received) == reached
    replay.attempt.refresh_from_db()
    assert replay.attempt.replay_divergence["path"] == "$.prompt"


def test_a_messages_miss_is_raised_by_the_anthropic_sdk_in_its_own_shape(wire, make_rollout):
    def calls(token: str) -> list:
        message = claude(wire.base, token).messages.create(
            model=MODEL, max_tokens=64, messages=MESSAGES
        )
        return [block.model_dump() for block in message.content]

    calls.provider = "claude"
    original = recording_of(make_rollout, 1, calls)
    replay = make_rollout(provider="claude", replay_of=original.job, replay_on_miss="fail")
    assert calls(replay.token) == original.said
    sdk = anthropic.Anthropic(
        base_url=f"{wire.base}/api/interceptor/v1/{replay.token}", api_key=CALLER_KEY
    )
    with pytest.raises(anthropic.UnprocessableEntityError) as caught:
        sdk.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    assert caught.value.body["error"]["type"] == "replay_divergence"
    assert "call 2 of seed 7 repeat 0: $ was <1 calls recorded>" in str(caught.value)
    assert len(wire.anthropic.received) == 1
    assert [c.replay for c in recorded(replay.attempt, 2)] == ["replayed", "refused"]
