"""Triage on the job page and the seed page: the seed table's filter read from the query string
(so the seed page's previous / next / next failure walk the same rows), failures grouped by
error, and free-text search over a job's seeds (errors, the task app's answer, the messages of
every LLM call)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.http import QueryDict

from jobs.models import EvalJob, SeedRun, SeedStatus
from traces.models import LLMCall

# The query-string keys of the seed table's filter and order; the seed page carries them on.
TABLE_KEYS = ("failures", "min_score", "max_score", "sort", "error", "q")
MAX_QUERY = 200
_NUMBERS = re.compile(r"\b\d{4,}\b|\b[0-9a-f]{12,}\b")


def error_class(error: str | None) -> str:
    """What a failure is, without its particulars: the message up to its first ': ' (where
    evalhub's messages put the details), long numbers and ids blanked."""
    if not error:
        return ""
    head = error.split(": ", 1)[0].strip()
    return _NUMBERS.sub("…", head)[:120]


@dataclass(frozen=True)
class TableQuery:
    failures_only: bool = False
    min_score: float | None = None
    max_score: float | None = None
    sort: str = "seed"
    descending: bool = False
    error: str = ""
    q: str = ""

    @classmethod
    def from_query(cls, params: QueryDict) -> TableQuery:
        sort = params.get("sort", "seed")
        return cls(
            failures_only=params.get("failures") == "1",
            min_score=_float(params.get("min_score")),
            max_score=_float(params.get("max_score")),
            sort=sort.lstrip("-"),
            descending=sort.startswith("-"),
            error=params.get("error", "")[:MAX_QUERY],
            q=params.get("q", "").strip()[:MAX_QUERY],
        )

    def as_filter(self) -> dict[str, Any]:
        """The filter as the template reads it (`table_filter`)."""
        return {
            "failures_only": self.failures_only,
            "min_score": self.min_score,
            "max_score": self.max_score,
            "error": self.error,
            "q": self.q,
        }


def _float(raw: str | None) -> float | None:
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def carried_query(params: QueryDict) -> str:
    """The table's filter and order alone, as a query string for links between seeds."""
    kept = QueryDict(mutable=True)
    for key in TABLE_KEYS:
        if params.get(key):
            kept[key] = params[key]
    return kept.urlencode()


def seeds_matching(*, job: EvalJob, text: str) -> Q:
    """The job's samples of seeds whose error, metrics or trace, or any LLM call's request or
    answer, contain `text` (any case), as a filter of its seed runs."""
    runs = SeedRun.objects.filter(job=job).annotate(
        metrics_text=Cast("metrics", TextField()), trace_text=Cast("task_trace", TextField())
    )
    runs = runs.filter(
        Q(error__icontains=text) | Q(metrics_text__icontains=text) | Q(trace_text__icontains=text)
    )
    calls = LLMCall.objects.filter(attempt__seed_run__job=job).annotate(
        request_text=Cast("request", TextField()), response_text=Cast("response", TextField())
    )
    calls = calls.filter(Q(request_text__icontains=text) | Q(response_text__icontains=text))
    return Q(seed__in=runs.values("seed")) | Q(seed__in=calls.values("attempt__seed_run__seed"))


def failure_groups(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(error class, number of failed seeds), the most common first."""
    counts = Counter(
        error_class(r["error"]) or "(no message)" for r in rows if r["status"] == SeedStatus.FAILED
    )
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True)
class Neighbours:
    previous: int | None = None
    next: int | None = None
    next_failure: int | None = None
    position: int | None = None  # 1-based, in the rows shown; None when the seed is not among them
    count: int = 0


def neighbours(*, shown: list[dict[str, Any]], seed: int) -> Neighbours:
    """The seeds before and after `seed` in the table's rows, and the next failed one after it
    (from the top when `seed` is not among them)."""
    seeds = [r["seed"] for r in shown]
    if seed not in seeds:
        failure = next((r["seed"] for r in shown if r["status"] == SeedStatus.FAILED), None)
        return Neighbours(next_failure=failure, count=len(seeds))
    i = seeds.index(seed)
    failure = next((r["seed"] for r in shown[i + 1 :] if r["status"] == SeedStatus.FAILED), None)
    return Neighbours(
        previous=seeds[i - 1] if i > 0 else None,
        next=seeds[i + 1] if i + 1 < len(seeds) else None,
        next_failure=failure,
        position=i + 1,
        count=len(seeds),
    )
