"""The seed page of a sample with thousands of LLM calls, a page of calls at a time: each page
its share of the calls and a link to the next, every call on exactly one page, and a page's
conversation read as the whole conversation reads it."""

from __future__ import annotations

import html as htmllib
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from frontend import selectors as dash
from jobs.models import RolloutAttempt, SeedRun
from tests.frontend import job_rows
from tests.support.big_sample import big_sample_make
from traces.models import LLMCall
from traces.redaction import job_redactor

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="pw-for-tests-123")


@pytest.fixture
def web(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def shown_calls(page: str) -> list[int]:
    return [int(seq) for seq in re.findall(r'<div class="llmcall" data-call="(\d+)"', page)]


def test_seed_page_of_thousands_of_calls_is_paged(web, alice):
    seed_run = big_sample_make(owner=alice, calls=1000)
    path = f"/jobs/{seed_run.job.id}/seeds/0/"
    first = web.get(path).content.decode()
    assert shown_calls(first) == list(range(1, dash.SEED_PAGE_CALLS + 1))
    assert "This sample made 1000 LLM calls" in first and "data-first-calls" not in first
    seen, page, pages = [], first, 1
    while True:
        seen += shown_calls(page)
        following = re.search(r'<a href="\?([^"]+)" data-next-calls>', page)
        if following is None:
            break
        page = web.get(f"{path}?{htmllib.unescape(following.group(1))}").content.decode()
        pages += 1
        assert "data-first-calls" in page
        assert len(shown_calls(page)) <= dash.SEED_PAGE_CALLS
    assert "data-last-calls" in page
    assert pages == 5 and seen == list(range(1, 1001))


def test_a_small_sample_is_on_one_page(web, alice):
    job = job_rows.job_make(owner=alice, seeds=[0])
    job_rows.seed_complete(seed_run=SeedRun.objects.get(job=job))
    page = web.get(f"/jobs/{job.id}/seeds/0/").content.decode()
    assert shown_calls(page) == [1, 2] and "data-calls-pager" not in page


def a_long_conversation(seed_run: SeedRun, *, attempts: int, calls: int) -> None:
    """Attempts whose agent resends its whole history each call, a tool call each answer."""
    now = timezone.now()
    for number in range(1, attempts + 1):
        attempt = RolloutAttempt.objects.create(
            seed_run=seed_run, number=number, run_id=f"run-{number}", token_hash=f"{number:064d}",
            status="succeeded", started_at=now, finished_at=now,
        )  # fmt: skip
        history = [{"role": "system", "content": "Add up."}, {"role": "user", "content": "Go."}]
        for seq in range(1, calls + 1):
            answer = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{number}-{seq}", "type": "function",
                 "function": {"name": "add", "arguments": f'{{"n": {seq}}}'}}]}  # fmt: skip
            LLMCall.objects.create(
                attempt=attempt,
                seq=seq,
                request={"messages": list(history)},
                response={"choices": [{"message": answer, "finish_reason": "tool_calls"}]},
                started_at=now + timedelta(seconds=seq),
            )
            history += [answer, {"role": "tool", "tool_call_id": f"c{number}-{seq}",
                                 "content": str(seq)}]  # fmt: skip


def as_shown(views) -> list[tuple]:
    return [
        (v.attempt.number, s.call.seq, s.history_rewritten, repr(s.new_messages), repr(s.answer))
        for v in views
        for s in v.steps
    ]


def test_pages_read_the_conversation_as_the_whole_does(alice):
    job = job_rows.job_make(owner=alice, seeds=[0])
    seed_run = SeedRun.objects.get(job=job)
    a_long_conversation(seed_run, attempts=2, calls=5)
    redactor = job_redactor(job=job)
    whole = dash.seed_attempts(seed_run=seed_run, redactor=redactor)
    paged, after, headers = [], None, []
    while True:
        page = dash.seed_attempts_page(seed_run=seed_run, redactor=redactor, size=3, after=after)
        paged += as_shown(page.attempts)
        headers.append([v.attempt.number for v in page.attempts])
        if page.next_after is None:
            break
        after = page.next_after
    assert paged == as_shown(whole) and len(paged) == 10
    assert not any(rewritten for _, _, rewritten, _, _ in paged)
    # Each page shows the attempts its calls are in: calls 1-3 | 4-5 and 1 | 2-4 | 5.
    assert headers == [[1], [1, 2], [2], [2]]


def test_review_and_compare_pages_show_a_big_samples_first_calls(web, alice):
    base = big_sample_make(owner=alice, calls=450)
    candidate = big_sample_make(owner=alice, calls=30)
    review = web.get(f"/jobs/{base.job.id}/review/").content.decode()
    assert review.count("Thinking about step ") == dash.SEED_PAGE_CALLS
    assert "data-more-calls" in review
    query = f"base={base.job.id}&candidate={candidate.job.id}"
    compared = web.get(f"/compare/seeds/0/?{query}").content.decode()
    sides = compared.split('data-side="candidate"')
    assert sides[0].count("Thinking about step ") == dash.SEED_PAGE_CALLS
    assert sides[1].count("Thinking about step ") == 30
    assert "data-more-calls" in sides[0] and "data-more-calls" not in sides[1]
