import datetime as dt
import json
import uuid

from django.contrib.auth import get_user_model
from django.utils import timezone

from evalhub.fakeprovider import completion
from jobs.models import EvalJob, RolloutAttempt, SeedRun
from traces.calls.recording import CallRecord, llm_call_build, llm_calls_save
from traces.models import LLMCall

REQUEST = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi there"}]}


def _attempt(job, seed):
    return RolloutAttempt.objects.create(
        seed_run=SeedRun.objects.create(job=job, seed=seed),
        number=1,
        run_id=uuid.uuid4().hex,
        token_hash=uuid.uuid4().hex,
        started_at=timezone.now(),
    )


def _record(attempt_id, started_at, **fields):
    return CallRecord(
        attempt_id=attempt_id,
        job_id="j",
        provider="openai",
        price_provider="openai",
        request=REQUEST,
        started_at=started_at,
        response_body=json.dumps(completion(REQUEST)).encode(),
        http_status=200,
        **fields,
    )


def test_calls_are_numbered_per_attempt_in_the_order_they_started(db):
    job = EvalJob.objects.create(
        owner=get_user_model().objects.create(username="u"), task_app_url="http://x"
    )
    a, b = _attempt(job, 1), _attempt(job, 2)
    t = timezone.now()
    LLMCall.objects.create(attempt=a, seq=1, started_at=t)
    _record_calls(
        records=[
            _record(a.id, t + dt.timedelta(seconds=2)),
            _record(b.id, t + dt.timedelta(seconds=1)),
            _record(a.id, t + dt.timedelta(seconds=1)),
        ]
    )
    got = list(LLMCall.objects.filter(attempt=a).order_by("seq").values_list("seq", "started_at"))
    assert got == [(1, t), (2, t + dt.timedelta(seconds=1)), (3, t + dt.timedelta(seconds=2))]
    assert list(LLMCall.objects.filter(attempt=b).values_list("seq", flat=True)) == [1]


def test_a_call_of_a_deleted_attempt_does_not_lose_the_others(transactional_db):
    # Real transactions: foreign keys are checked when one commits.
    job = EvalJob.objects.create(
        owner=get_user_model().objects.create(username="u"), task_app_url="http://x"
    )
    a = _attempt(job, 1)
    saved = _record_calls(
        records=[_record(a.id, timezone.now()), _record(a.id + 999, timezone.now())]
    )
    assert [c.attempt_id for c in saved] == [a.id]
    assert LLMCall.objects.get().total_tokens == 1500


def test_a_call_that_never_reached_the_provider_costs_nothing(db):
    job = EvalJob.objects.create(
        owner=get_user_model().objects.create(username="u"), task_app_url="http://x"
    )
    a = _attempt(job, 1)
    record = _record(a.id, timezone.now(), forwarded=False, error="budget_exceeded: spent")
    record.response_body, record.http_status = b"", 429
    (call,) = _record_calls(records=[record])
    assert (call.total_tokens, call.cost_usd, call.cost_unknown) == (0, 0.0, False)
    assert not call.usage_estimated


def _record_calls(*, records: list[CallRecord]) -> list[LLMCall]:
    """What the interceptor's writer thread does with a batch of records."""
    return llm_calls_save(calls=[llm_call_build(record=r) for r in records])
