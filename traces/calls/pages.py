"""A sample's LLM calls a page at a time, for what shows a sample that made thousands of them
(the seed page, the streamed trace document): keyset pages by (attempt number, seq, id), so a
page deep in a long rollout costs what the first one does and nothing holds every call's body
at once. The order is the one everything else reads calls in: attempts by number, calls by seq."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import QuerySet

from jobs.selectors import keyset_pages
from traces.models import LLMCall
from traces.results.rows import model_rows

Row = TypeVar("Row")
# Calls read at once when their bodies are left out (what `totals.usage_from_calls` sums).
FIGURES_PAGE = 2000


def attempt_call_pages(
    *,
    attempt_id: int,
    size: int,
    kind: str | None = None,
    after: tuple[int, int] | None = None,
    limit: int | None = None,
    read: Callable[[QuerySet[LLMCall]], list[Row]] = list,
) -> Iterator[list[Row]]:
    """The attempt's calls (of `kind`, or all) by seq, `size` at a time, each page as `read`
    makes it of its slice of the queryset (rows with a `seq` and an `id`). `after`: the
    (seq, id) of the last call already read; `limit`: the most calls in all."""
    calls = LLMCall.objects.filter(attempt_id=attempt_id)
    if kind is not None:
        calls = calls.filter(kind=kind)
    return keyset_pages(calls, ("seq", "id"), size=size, read=read, after=after, limit=limit)


def calls_without_bodies(*, attempts: Sequence[Any], kind: str | None = None) -> list[Any]:
    """The calls of these attempts (of `kind`, or all), in order, as rows without their request
    and response: a sample's figures read without holding what its calls said."""
    rows: list[Any] = []
    for attempt in attempts:
        for page in attempt_call_pages(
            attempt_id=attempt.id, size=FIGURES_PAGE, kind=kind,
            read=lambda calls: list(model_rows(calls, exclude=("request", "response"))),
        ):  # fmt: skip
            rows.extend(page)
    return rows


@dataclass(frozen=True)
class CallPage:
    """One page of a sample's calls.

    `calls`: the page's calls in order. `before`: the call just before the first of them in
    the same attempt (a conversation's new messages are read against it), or None.
    `after_attempt`: the number of the attempt the page continues (None on the first page).
    `next_after`: the id of the page's last call when more calls follow (the next page's
    cursor), else None. `last_attempt`: the number of the attempt of the page's last call
    when more follow (the rest of the sample is on later pages), else None."""

    calls: list[LLMCall]
    before: LLMCall | None = None
    after_attempt: int | None = None
    next_after: int | None = None
    last_attempt: int | None = None


def seed_calls_page(
    *, attempts: Sequence[Any], size: int | None, kind: str | None = None, after: int | None = None
) -> CallPage:
    """The calls of the sample whose `attempts` (rows with an `id` and a `number`, by number)
    these are, `size` of them (all: None) after the call whose id is `after` (from the first
    when it is None or not one of them)."""
    cursor = None
    if after is not None:
        cursor = LLMCall.objects.filter(pk=after, attempt_id__in=[a.id for a in attempts])
        cursor = cursor.only("attempt_id", "seq").first()
    start, key = 0, None
    if cursor is not None:
        start = next(i for i, a in enumerate(attempts) if a.id == cursor.attempt_id)
        key = (cursor.seq, cursor.id)
    wanted = None if size is None else size + 1  # one more tells whether another page follows
    calls: list[LLMCall] = []
    for attempt in attempts[start:]:
        left = None if wanted is None else wanted - len(calls)
        if left == 0:
            break
        for page in attempt_call_pages(
            attempt_id=attempt.id, size=left or 500, kind=kind, after=key, limit=left
        ):
            calls.extend(page)
        key = None
    more = size is not None and len(calls) > size
    calls = calls[:size] if more else calls
    number = {a.id: a.number for a in attempts}
    before = None
    if cursor is not None and calls and calls[0].attempt_id == cursor.attempt_id:
        before = LLMCall.objects.get(pk=cursor.pk)  # its request and answer, for the conversation
    return CallPage(
        calls=calls,
        before=before,
        after_attempt=number[cursor.attempt_id] if cursor is not None else None,
        next_after=calls[-1].id if more else None,
        last_attempt=number[calls[-1].attempt_id] if more else None,
    )
