"""The dashboard's reads: the conversation rebuilt from LLM calls, job figures."""

from __future__ import annotations

from types import SimpleNamespace

from frontend import selectors as dash
from jobs.models import SeedRun
from tests.frontend import job_rows
from traces.calls.messages import assistant_message
from traces.calls.usage import response_from_stream
from traces.redaction import Redactor
from traces.results.totals import seed_usage


def call(messages, response, seq=1):
    return SimpleNamespace(seq=seq, request={"messages": messages}, response=response, error=None)


def completion(message, finish="stop"):
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


SYSTEM = {"role": "system", "content": "be brief"}
USER = {"role": "user", "content": "hi"}


def test_each_step_shows_only_what_is_new_since_the_previous_call():
    answer = {"role": "assistant", "content": "hello", "refusal": None}
    echoed = {"role": "assistant", "content": "hello"}  # clients drop fields they echo back
    follow = {"role": "user", "content": "again"}
    steps = dash.conversation_steps(
        redactor=Redactor(),
        calls=[
            call([SYSTEM, USER], completion(answer)),
            call(
                [SYSTEM, USER, echoed, follow],
                completion({"role": "assistant", "content": "ok"}),
                2,
            ),
        ],
    )
    assert [m.text for m in steps[0].new_messages] == ["be brief", "hi"]
    assert [m.text for m in steps[1].new_messages] == ["again"]
    assert not steps[1].history_rewritten
    assert steps[1].answer[0].text == "ok"


def test_a_rewritten_history_is_shown_whole_and_flagged():
    steps = dash.conversation_steps(
        redactor=Redactor(),
        calls=[
            call([SYSTEM, USER], completion({"role": "assistant", "content": "a"})),
            call(
                [SYSTEM, {"role": "user", "content": "summary"}],
                completion({"role": "assistant", "content": "b"}),
                2,
            ),
        ],
    )
    assert steps[1].history_rewritten
    assert [m.text for m in steps[1].new_messages] == ["be brief", "summary"]


def test_a_streamed_response_reads_as_its_assembled_message():
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "think "}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "hard"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "function": {"name": "add", "arguments": '{"a":'},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"total_tokens": 9}},
    ]
    # The interceptor stores a stream assembled by the one assembler; the page reads that.
    message, finish = assistant_message(response_from_stream(chunks))
    shown = dash.message_from_openai(message)
    assert finish == "tool_calls"
    assert shown.reasoning == "think hard"
    assert shown.tool_calls[0].name == "add" and shown.tool_calls[0].id == "c1"
    assert shown.tool_calls[0].arguments == '{\n  "a": 1\n}'


def test_inline_think_blocks_are_folded_as_reasoning():
    shown = dash.message_from_openai({"role": "assistant", "content": "<think>step 1</think>\n42"})
    assert shown.reasoning == "step 1" and shown.text == "42"


def test_content_parts_and_arguments_that_are_not_json_are_kept():
    shown = dash.message_from_openai(
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}],
        }
    )
    assert shown.text == "look" and shown.attachments == ["image_url"]
    tool = dash.message_from_openai(
        {
            "role": "assistant",
            "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "not json"}}],
        }
    )
    assert tool.tool_calls[0].arguments == "not json"


def test_a_missing_or_malformed_response_gives_no_answer():
    for response in (None, {}, {"choices": []}, {"error": "upstream 500"}, "text"):
        assert assistant_message(response) == (None, "")


def test_job_list_figures_sum_usage_and_never_show_an_unknown_cost_as_zero(db, django_user_model):
    owner = django_user_model.objects.create_user(username="carol")
    priced = job_rows.job_run_all(
        job=job_rows.job_make(owner=owner, seeds=[0, 1]), scores={0: 0.0, 1: 1.0}
    )
    unpriced = job_rows.job_make(owner=owner, seeds=[0, 1])
    job_rows.attempt_record(seed_run=SeedRun.objects.filter(job=unpriced).first(), cost=None)
    idle = job_rows.job_make(owner=owner, seeds=[0, 1, 2])
    figures = dash.job_list_figures(jobs=[priced, unpriced, idle])
    assert figures[priced.id]["mean_score"] == 0.5
    assert figures[priced.id]["tokens"] == 2 * 332
    assert abs(figures[priced.id]["cost_usd"] - 0.0008) < 1e-12
    assert figures[priced.id]["progress"]["completed"] == 2
    assert figures[unpriced.id]["cost_usd"] is None
    assert figures[idle.id] == {
        "progress": {"cancelled": 0, "running": 0, "pending": 3,
                     **dash.progress_bar(succeeded=0, failed=0, total=3)},
        "mean_score": None, "tokens": 0, "cost_usd": 0.0, "duration_s": None,
    }  # fmt: skip


def test_one_seeds_usage_matches_the_jobs_per_seed_usage(db, django_user_model):
    owner = django_user_model.objects.create_user(username="dave")
    job = job_rows.job_make(owner=owner, seeds=[0, 1, 2])
    runs = list(SeedRun.objects.filter(job=job).order_by("seed"))
    job_rows.attempt_record(seed_run=runs[0])
    job_rows.attempt_record(seed_run=runs[1], cost=None)
    per_seed = seed_usage(job=job)
    for run in runs:
        assert seed_usage(job=job, seed_run=run).get(run.id) == per_seed.get(run.id)
    assert per_seed[runs[1].id].cost_usd is None and per_seed[runs[1].id].cost_unknown
