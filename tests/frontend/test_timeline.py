"""The seed page's time line from recorded rows: calls where they started, overlapping calls on
rows of their own, tools after the call that asked for them, and the time split between the
model, the tools and the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest

from frontend import timeline
from frontend.selectors import seed_attempts
from jobs.models import RolloutAttempt, SeedRun
from tests.frontend import job_rows
from traces.models import LLMCall
from traces.redaction import job_redactor

pytestmark = pytest.mark.django_db


def a_seed(django_user_model, *, overlap: bool):
    owner = django_user_model.objects.create_user(username="erin")
    job = job_rows.job_make(owner=owner, seeds=[0])
    run = job_rows.seed_complete(seed_run=SeedRun.objects.get(job=job))
    attempt = RolloutAttempt.objects.get(seed_run=run)
    start = attempt.started_at
    # 2 s in all; call 1 at 0-400 ms, call 2 at 1000-1400 ms (or 200-600 ms: overlapping).
    LLMCall.objects.filter(attempt=attempt, seq=1).update(
        started_at=start, latency_ms=400.0, ttft_ms=100.0
    )
    LLMCall.objects.filter(attempt=attempt, seq=2).update(
        started_at=start + timedelta(milliseconds=200 if overlap else 1000),
        latency_ms=400.0,
        ttft_ms=None,
    )
    attempt.finished_at = start + timedelta(seconds=2)
    attempt.save(update_fields=["finished_at"])
    return job, run


def views_of(job, run):
    return seed_attempts(seed_run=run, redactor=job_redactor(job=job))


def test_calls_and_tools_on_one_axis_and_the_time_split(django_user_model):
    job, run = a_seed(django_user_model, overlap=False)
    tools = [{"step": 1, "call_id": "call_0", "name": "multiply", "duration_ms": 300.0},
             {"step": 1, "call_id": "call_0", "name": "add", "duration_ms": 100.0,
              "error": "no such tool"}]  # fmt: skip
    tl = timeline.seed_timelines(views_of(job, run), tools)[1]
    assert tl.total_ms == pytest.approx(2000)
    calls, used = tl.lanes
    assert [(s.x, s.width, s.row) for s in calls.spans] == [(0, 200, 0), (500, 200, 0)]
    assert calls.spans[0].ttft_width == 50 and calls.spans[1].ttft_width == 0
    assert calls.spans[0].href == "#call-1-1"
    # The tools the first answer asked for (call_0), after it, one after the other.
    assert [(s.start_ms, s.end_ms, s.failed) for s in used.spans] == [
        (pytest.approx(400), pytest.approx(700), False),
        (pytest.approx(700), pytest.approx(800), True),
    ]
    assert (tl.model_ms, tl.tool_ms, tl.other_ms) == (
        pytest.approx(800),
        pytest.approx(400),
        pytest.approx(800),
    )
    assert tl.ticks[0] == (0, "0 s", "start") and tl.ticks[-1] == (100, "2 s", "end")


def test_overlapping_calls_take_rows_of_their_own_and_count_once(django_user_model):
    job, run = a_seed(django_user_model, overlap=True)
    tl = timeline.seed_timelines(views_of(job, run), [])[1]
    (calls,) = tl.lanes
    assert calls.rows == 2 and [s.row for s in calls.spans] == [0, 1]
    assert tl.model_ms == pytest.approx(600)  # 0-600 ms covered, overlap once
    assert tl.other_ms == pytest.approx(1400)


def test_an_attempt_without_calls_or_tools_has_no_time_line(django_user_model):
    owner = django_user_model.objects.create_user(username="finn")
    job = job_rows.job_make(owner=owner, seeds=[0])
    assert timeline.seed_timelines(views_of(job, SeedRun.objects.get(job=job)), []) == {}
