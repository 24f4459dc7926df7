"""A call's row written ahead (in flight) before it is forwarded, completed in place with its
answer, or marked lost when its web process died first: then its usage is unknown, counted
as such in the result rows, the summary and the trace document, never as 0."""

import contextlib
import datetime as dt
import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from jobs.models import EvalJob, SeedStatus
from tests.support import servers
from tests.traces.test_documents import validate
from tests.traces.test_interceptor import MESSAGES, recorded, through
from tests.traces.test_services import REQUEST, _attempt, _record
from traces.calls.call_rows import call_new
from traces.calls.recording import (
    LOST_ERROR,
    llm_call_ahead,
    llm_call_build,
    llm_calls_ahead_save,
    llm_calls_lost_mark,
    llm_calls_save,
)
from traces.models import CallState, LLMCall
from traces.redaction import job_redactor
from traces.results.result_rows import job_results
from traces.results.totals import job_spent
from traces.zip.documents import seed_trace_document

pytestmark = pytest.mark.django_db


@pytest.fixture
def job():
    owner = get_user_model().objects.create(username="u")
    return EvalJob.objects.create(owner=owner, task_app_url="http://x", num_seeds=2)


def _ahead(records):
    """What the writer does before the calls are forwarded: their rows, in flight."""
    rows = llm_calls_ahead_save(calls=[llm_call_ahead(record=r) for r in records])
    for record, row in zip(records, rows, strict=True):
        record.row_id = row.pk
    return rows


def test_a_row_written_ahead_is_completed_in_place_and_keeps_its_number(job):
    a = _attempt(job, 1)
    t = timezone.now()
    first, second = _record(a.id, t), _record(a.id, t + dt.timedelta(seconds=1))
    _ahead([first, second])
    rows = list(LLMCall.objects.filter(attempt=a).order_by("seq"))
    assert [(r.seq, r.state, r.total_tokens, r.cost_unknown) for r in rows] == [
        (1, CallState.IN_FLIGHT, None, False),
        (2, CallState.IN_FLIGHT, None, False),
    ]
    assert rows[0].request == first.request
    llm_calls_save(calls=[llm_call_build(record=second)])
    rows = list(LLMCall.objects.filter(attempt=a).order_by("seq"))
    assert [(r.id, r.seq, r.state) for r in rows] == [
        (first.row_id, 1, CallState.IN_FLIGHT),
        (second.row_id, 2, CallState.DONE),
    ]
    assert rows[1].total_tokens == 1500 and rows[1].cost_usd > 0


def test_the_writers_calls_are_what_the_models_constructor_makes(job):
    """`call_new` (the writer's rows, without `Model.__init__`'s work per field) makes what
    `LLMCall(**values)` makes: every field given or at its default, a fresh default each
    (no two rows share a mutable one), unsaved; a name that is no field is refused."""
    record = _record(_attempt(job, 1).id, timezone.now())
    for built in (llm_call_ahead(record=record), llm_call_build(record=record)):
        values = {k: v for k, v in built.__dict__.items() if k != "_state"}
        assert values == {k: v for k, v in LLMCall(**values).__dict__.items() if k != "_state"}
        assert built._state.adding and built._state.db is None and built.pk is None
    bare = [call_new(attempt_id=1, seq=1, started_at=timezone.now()) for _ in range(2)]
    assert bare[0].request == {} and bare[0].request is not bare[1].request
    assert (bare[0].kind, bare[0].state, bare[0].cost_usd) == ("policy", "done", None)
    with pytest.raises(TypeError, match="no_such"):
        call_new(no_such=1)


def test_a_call_in_flight_changes_no_sum_nor_makes_the_cost_unknown(job):
    a = _attempt(job, 1)
    done, out = _record(a.id, timezone.now()), _record(a.id, timezone.now())
    _ahead([done, out])
    llm_calls_save(calls=[llm_call_build(record=done)])
    summary, (row,) = job_results(job=job)
    assert (row["tokens"], row["num_llm_calls"], row["llm_calls_usage_unknown"]) == (1500, 2, 0)
    assert row["cost_usd"] > 0 and summary["total_cost_usd"] == row["cost_usd"]
    assert summary["llm_calls_usage_unknown"] == 0


def test_a_call_lost_with_its_web_process_reads_as_unknown_usage_never_0(job, trace_schema):
    a, b = _attempt(job, 1), _attempt(job, 2)
    t = timezone.now() - dt.timedelta(minutes=30)
    answered, lost, recent = _record(a.id, t), _record(a.id, t), _record(b.id, timezone.now())
    _ahead([answered, lost, recent])
    llm_calls_save(calls=[llm_call_build(record=answered)])

    assert llm_calls_lost_mark(older_than=timezone.now() - dt.timedelta(minutes=10)) == 1
    call = LLMCall.objects.get(pk=lost.row_id)
    assert (call.state, call.error, call.total_tokens) == (CallState.LOST, LOST_ERROR, None)
    assert call.cost_usd is None and call.cost_unknown
    assert LLMCall.objects.get(pk=recent.row_id).state == CallState.IN_FLIGHT

    summary, rows = job_results(job=job)
    row = rows[0]
    assert (row["tokens"], row["num_llm_calls"], row["llm_calls_usage_unknown"]) == (1500, 2, 1)
    assert row["cost_usd"] is None and row["cost_unknown"]
    assert summary["llm_calls_usage_unknown"] == 1
    assert summary["total_cost_usd"] is None and summary["seeds_with_unknown_cost"] == 1
    # The budget counts what it knows (the call counts are kept apart, `llm_calls_admitted`).
    assert job_spent(job_id=job.id).tokens == 1500

    seed_run = a.seed_run
    seed_run.status = SeedStatus.SUCCEEDED
    seed_run.save()
    document = seed_trace_document(job=job, seed_run=seed_run, redactor=job_redactor(job=job))
    validate(document, trace_schema)
    entries = {c["seq"]: c for c in document["llm_calls"]}
    assert entries[2]["status"] == "lost" and entries[2]["usage"]["unknown"]
    assert entries[2]["usage"]["total_tokens"] is None and entries[2]["cost_unknown"]
    assert entries[1]["status"] == "ok" and not entries[1]["usage"]["unknown"]
    assert document["usage"]["llm_calls_usage_unknown"] == 1


def test_an_answer_that_comes_after_all_completes_the_lost_row(job):
    a = _attempt(job, 1)
    late = _record(a.id, timezone.now() - dt.timedelta(hours=1))
    _ahead([late])
    assert llm_calls_lost_mark(older_than=timezone.now()) == 1
    llm_calls_save(calls=[llm_call_build(record=late)])
    call = LLMCall.objects.get()
    assert (call.state, call.error, call.total_tokens, call.cost_unknown) == (
        CallState.DONE, None, 1500, False,
    )  # fmt: skip
    assert job_results(job=job)[0]["llm_calls_usage_unknown"] == 0


def test_the_row_is_in_the_database_before_the_provider_sees_the_call(
    interceptor_web, fake_upstream, make_rollout
):
    rollout = make_rollout()
    client = through(interceptor_web, rollout.token)
    call = threading.Thread(target=lambda: client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"fake": {"delay_s": 1.0}}
    ))  # fmt: skip
    call.start()
    try:
        servers.wait_until(lambda: fake_upstream.received, timeout=15, what="the call upstream")
        (row,) = LLMCall.objects.filter(attempt=rollout.attempt)
        assert (row.state, row.seq, row.total_tokens) == (CallState.IN_FLIGHT, 1, None)
        assert row.request["messages"] == MESSAGES
    finally:
        call.join(timeout=15)
    (done,) = recorded(rollout.attempt)
    assert (done.id, done.state, done.http_status) == (row.id, CallState.DONE, 200)
    assert done.total_tokens > 0 and not done.cost_unknown


def test_a_document_postgresql_refuses_loses_neither_its_numbers_nor_the_other_rows(
    transactional_db,
):
    # Real transactions: the rows written ahead commit as they run, as in the web process.
    owner = get_user_model().objects.create(username="u")
    job = EvalJob.objects.create(owner=owner, task_app_url="http://x", num_seeds=2)
    a, t = _attempt(job, 1), timezone.now()
    nul = {**REQUEST, "messages": [{"role": "user", "content": "a\u0000b"}]}
    records = [_record(a.id, t + dt.timedelta(seconds=n)) for n in range(3)]
    records[1].request = nul
    _ahead(records)
    records[0].response_body = records[0].response_body.replace(b'"id"', b'"x\\u0000": 1, "id"')
    llm_calls_save(calls=[llm_call_build(record=r) for r in records])
    rows = list(LLMCall.objects.filter(attempt=a).order_by("seq"))
    assert [(r.id, r.seq, r.state, r.total_tokens) for r in rows] == [
        (record.row_id, n, CallState.DONE, 1500) for n, record in enumerate(records, start=1)
    ]
    assert rows[2].request == REQUEST and rows[2].response["object"] == "chat.completion"
    if connection.vendor == "postgresql":  # jsonb holds no NUL: the numbers are kept
        assert "not_stored" in rows[1].request and "not_stored" in rows[0].response
        assert rows[0].request == REQUEST
    else:
        assert rows[1].request == nul and rows[0].response["x\u0000"] == 1


@pytest.mark.django_db(transaction=True)
def test_the_writer_threads_write_ahead_and_complete_every_call_and_checkpoint_sqlite_themselves():
    """Through `CallWriter` as the interceptor uses it: every call's row written ahead, then
    completed; the writer's connections leave the log's checkpoints to the completions'
    thread (traces/interceptor/writer.py), which has made them. SQLite only: the writer's
    threads live as long as their process, with their connections."""
    import asyncio

    from traces.interceptor import writer as writers

    if connection.vendor != "sqlite":
        pytest.skip(
            "the checkpoints are SQLite's; PostgreSQL's test database is dropped at the end"
        )

    owner = get_user_model().objects.create(username="w")
    job = EvalJob.objects.create(owner=owner, task_app_url="http://x", num_seeds=1)
    a = _attempt(job, 1)
    records = [_record(a.id, timezone.now()) for _ in range(300)]
    writer = writers.CallWriter()

    async def calls():
        for record in records:
            await writer.ahead(record)
            writer.submit(record)

    asyncio.run(calls())
    writer.flush()
    rows = LLMCall.objects.filter(attempt=a)
    assert sorted(rows.values_list("seq", flat=True)) == list(range(1, 301))
    assert set(rows.values_list("state", flat=True)) == {CallState.DONE}
    # 600 rows written (300 ahead, 300 completed): a checkpoint every _CHECKPOINT_ROWS.
    assert writer._checkpoints.made >= 600 // writers._CHECKPOINT_ROWS - 1


@pytest.mark.parametrize("more_coming", [True, False], ids=["calls-in-flight", "a-lone-call"])
def test_answers_share_a_save_only_while_other_calls_are_in_flight(more_coming):
    """The completions' thread gathers the answers that arrive soon after the first while other
    calls are in flight (at 8 and 32 callers a save held 1.3 calls); a lone caller's answer is
    saved at once: its next call's row, written ahead, would wait for a late save on SQLite."""
    from traces.interceptor.writer import _Queue

    answers = _Queue()
    answers.put_nowait("first")
    threading.Timer(0.2, answers.put_nowait, args=("second",)).start()
    gathered: list[str] = []
    answers.gather(2.0, gathered.append, lambda: more_coming)
    assert gathered == (["first", "second"] if more_coming else ["first"])


@pytest.mark.django_db(transaction=True)
def test_the_writer_counts_the_calls_in_flight_back_to_none():
    """What the completions' thread reads to know more answers will come: a try written ahead
    counts until it is submitted, whether it was answered, failed or its caller went."""
    import asyncio

    from traces.interceptor.writer import CallWriter

    if connection.vendor != "sqlite":
        pytest.skip("the writer's threads keep their connections: the test database would stay")
    owner = get_user_model().objects.create(username="f")
    job = EvalJob.objects.create(owner=owner, task_app_url="http://x", num_seeds=1)
    a = _attempt(job, 1)
    writer = CallWriter()
    seen: list[int] = []

    async def call(gone: bool) -> None:
        record = _record(a.id, timezone.now())
        task = asyncio.create_task(writer.ahead(record))
        if gone:  # the caller went while its row was being written
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return
        await task
        seen.append(writer.in_flight)
        await asyncio.sleep(0.01)  # the provider
        writer.submit(record)

    async def calls():
        await asyncio.gather(*(call(gone=n % 5 == 0) for n in range(40)))

    asyncio.run(calls())
    writer.flush()
    assert max(seen) > 1
    assert writer.in_flight == 0
    assert LLMCall.objects.filter(attempt=a, state=CallState.DONE).count() == 32
