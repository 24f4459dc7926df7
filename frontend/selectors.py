"""Reads for the dashboard: figures for a page of jobs, a seed's attempts and the conversation
its policy lived, rebuilt from the recorded LLM calls."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F, QuerySet
from django.utils import timezone

from frontend import live
from jobs import selectors as job_selectors
from jobs.models import ApiKey, EvalJob, RolloutAttempt, SeedRun
from traces.calls import conversation, pages
from traces.calls.messages import reasoning_of, split_think
from traces.models import CallKind, LLMCall
from traces.redaction import Redactor
from traces.results import totals

# --- API keys ---------------------------------------------------------------------------------


def api_key_list(*, user: AbstractBaseUser) -> QuerySet[ApiKey]:
    """The user's keys, live ones first, newest first."""
    return ApiKey.objects.filter(user=user).order_by(
        F("revoked_at").asc(nulls_first=True), "-created_at"
    )


# --- jobs list ------------------------------------------------------------------------------


def job_list_figures(*, jobs: list[EvalJob]) -> dict[str, dict[str, Any]]:
    """Progress, mean score, tokens and cost of each job of a page, in three queries."""
    progress = job_selectors.job_progress_many(jobs=jobs)
    usage = totals.job_usage_many(job_ids=[job.id for job in jobs])
    figures = {}
    for job in jobs:
        p = progress[job.id]
        figures[job.id] = {
            # The counts (running, pending, cancelled too) and what the bar draws.
            "progress": {
                **{k: p[k] for k in ("cancelled", "running", "pending")},
                **progress_bar(succeeded=p["succeeded"], failed=p["failed"], total=p["total"]),
            },
            "mean_score": p["mean_reward"],
            "tokens": usage[job.id].total_tokens,
            "cost_usd": usage[job.id].cost_usd,
            "duration_s": job_duration_s(job=job),
        }
    return figures


def percent(done: int, total: int) -> float:
    return round(100.0 * done / total, 1) if total else 0.0


def progress_bar(*, succeeded: int, failed: int, total: int) -> dict[str, Any]:
    """What a progress bar draws: done of total, the succeeded and failed parts in percent."""
    return {
        "completed": succeeded + failed,
        "total": total,
        "succeeded": succeeded,
        "failed": failed,
        "percent": percent(succeeded + failed, total),
        "percent_succeeded": percent(succeeded, total),
        "percent_failed": percent(failed, total),
    }


def job_live_figures(*, job: EvalJob) -> dict[str, Any]:
    """One read of what the job page keeps current (its progress bar, counts, badge and figure
    cards): the page renders it and its live updates fetch it again, so the bar and the cards
    never disagree."""
    figures = job_list_figures(jobs=[job])[job.id]
    return {
        "progress": figures["progress"],
        "shown": job_status_shown(job=job, progress=figures["progress"]),
        "texts": live.job_page_figure_texts(job=job, figures=figures),
    }


def job_duration_s(*, job: EvalJob, now: datetime | None = None) -> float | None:
    """Seconds from start to end, or to now while the job runs; None before it starts."""
    if job.started_at is None:
        return None
    end = job.completed_at or (None if job.is_terminal else (now or timezone.now()))
    if end is None:
        return None
    return max(0.0, (end - job.started_at).total_seconds())


def job_status_shown(*, job: EvalJob, progress: dict[str, Any]) -> dict[str, str]:
    """The job's badge (`frontend.live.status_shown`) from its progress."""
    return live.status_shown(
        status=job.status, succeeded=progress["succeeded"], failed=progress["failed"]
    )


def job_progress_many(*, owner: AbstractBaseUser, job_ids: list[str]) -> dict[str, Any]:
    """Status and progress of several of the owner's jobs (the jobs list polls this)."""
    jobs = list(EvalJob.objects.filter(owner=owner, pk__in=job_ids[:200]))
    figures = job_list_figures(jobs=jobs)
    return {
        job.id: {
            "status": job.status,
            "shown": job_status_shown(job=job, progress=figures[job.id]["progress"]),
            "terminal": job.is_terminal,
            **figures[job.id]["progress"],
            "figures": live.job_figure_texts(job=job, figures=figures[job.id]),
        }
        for job in jobs
    }


# --- a seed's attempts and conversation ----------------------------------------------------


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # pretty-printed when it is JSON


@dataclass
class Message:
    """One message of the conversation, normalised from OpenAI chat format."""

    role: str
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    attachments: list[str] = field(default_factory=list)


@dataclass
class CallStep:
    """An LLM call: the messages the policy added since the previous call, then the answer.
    Everything shown of it is redacted (`error` and the messages; `call` for its figures)."""

    call: LLMCall
    new_messages: list[Message]
    history_rewritten: bool
    answer: list[Message]
    finish_reason: str = ""
    error: str = ""


@dataclass
class AttemptView:
    attempt: RolloutAttempt
    steps: list[CallStep]
    error: str = ""


# The most LLM calls the seed page shows at once; a bigger sample's are paged.
SEED_PAGE_CALLS = 200


@dataclass
class SeedPage:
    """The attempts a page of a sample's conversation shows, each with its calls on the page.
    `next_after`: the cursor of the next page (the id of this page's last call), None on the
    last; `continued`: whether calls came before this page's; `paged`: whether the sample's
    calls are on more than this page."""

    attempts: list[AttemptView]
    next_after: int | None = None
    continued: bool = False

    @property
    def paged(self) -> bool:
        return self.continued or self.next_after is not None


def seed_attempts(*, seed_run: SeedRun, redactor: Redactor) -> list[AttemptView]:
    """Every attempt of the seed, oldest first, each with its whole conversation, redacted."""
    return seed_attempts_page(seed_run=seed_run, redactor=redactor, size=None).attempts


def seed_attempts_page(
    *, seed_run: SeedRun, redactor: Redactor, size: int | None, after: int | None = None,
    last_attempt: bool = False,
) -> SeedPage:  # fmt: skip
    """The seed's attempts with `size` of its policy's calls (all: None) after the call whose
    id is `after` (`traces.calls.pages`), redacted. The attempts shown are those the page's
    calls fall in, and those without calls between them (the first page: before them too; the
    last page: after them); with `last_attempt`, the last attempt alone. The verifier's judge
    calls are on the verdict (jobs/verifier/)."""
    attempts = list(RolloutAttempt.objects.filter(seed_run=seed_run).order_by("number"))
    attempts = attempts[-1:] if last_attempt else attempts
    page = pages.seed_calls_page(attempts=attempts, size=size, kind=CallKind.POLICY, after=after)
    calls: dict[int, list[LLMCall]] = {a.id: [] for a in attempts}
    for call in page.calls:
        calls[call.attempt_id].append(call)
    views = []
    for a in attempts:
        continued = page.after_attempt is not None and a.number <= page.after_attempt
        cut = page.last_attempt is not None and a.number > page.last_attempt
        if (continued and not calls[a.id]) or cut:
            continue
        # The call before the page's first one, read only so its new messages are known.
        before = [page.before] if page.before is not None and page.before.attempt_id == a.id else []
        steps = conversation_steps(calls=before + calls[a.id], redactor=redactor)[len(before) :]
        views.append(AttemptView(attempt=a, steps=steps, error=redactor.text(a.error or "")))
    continued = page.after_attempt is not None
    return SeedPage(attempts=views, next_after=page.next_after, continued=continued)


def conversation_steps(*, calls: list[LLMCall], redactor: Redactor) -> list[CallStep]:
    """Each call's request repeats the history; show only what is new since the previous call
    and its answer. When a request does not continue the history (the task app trimmed or
    rewrote it), show that request whole and say so. The conversation is the one
    `traces.calls.conversation` reads of every wire format (a call without a route is a chat
    completion); it is redacted as shown, once read as chat."""
    exchanges = [(getattr(c, "route", "chat.completions"), c.request, c.response) for c in calls]
    steps = []
    tool_names: dict[str, str] = {}
    for call, turn in zip(calls, conversation.turns(exchanges), strict=True):
        new_messages = [message_from_openai(m) for m in redactor.value(turn.new)]
        answer = [message_from_openai(redactor.value(turn.answer))] if turn.answer else []
        for m in new_messages + answer:
            for tc in m.tool_calls:
                tool_names[tc.id] = tc.name
            if m.role == "tool" and not m.name:
                m.name = tool_names.get(m.tool_call_id, "")
        steps.append(
            CallStep(
                call=call,
                new_messages=new_messages,
                history_rewritten=turn.rewritten,
                answer=answer,
                finish_reason=turn.finish_reason,
                error=redactor.text(call.error or ""),
            )
        )
    return steps


def message_from_openai(raw: Any) -> Message:
    if not isinstance(raw, dict):
        return Message(role="unknown", text=json.dumps(raw, default=str))
    text, attachments = _content_text(raw.get("content"))
    # What counts as reasoning is decided in traces.calls.messages (the trace documents use it too).
    reasoning = reasoning_of(raw)
    if not isinstance(reasoning, str):
        reasoning = "" if reasoning is None else _pretty_json(reasoning)
    text = split_think(text)[1]
    tool_calls = []
    for tc in raw.get("tool_calls") or []:
        if isinstance(tc, dict):
            fn = tc.get("function") or {}
            tool_calls.append(
                ToolCall(
                    id=str(tc.get("id") or ""),
                    name=str(fn.get("name") or tc.get("type") or "tool"),
                    arguments=_pretty_json(fn.get("arguments")),
                )
            )
    if isinstance(raw.get("function_call"), dict):  # the older single-function format
        fn = raw["function_call"]
        tool_calls.append(
            ToolCall(
                id="", name=str(fn.get("name") or ""), arguments=_pretty_json(fn.get("arguments"))
            )
        )
    return Message(
        role=str(raw.get("role") or "unknown"),
        text=text,
        reasoning=reasoning,
        tool_calls=tool_calls,
        tool_call_id=str(raw.get("tool_call_id") or ""),
        name=str(raw.get("name") or ""),
        attachments=attachments,
    )


def _content_text(content: Any) -> tuple[str, list[str]]:
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        texts, attachments = [], []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text") or ""))
            elif isinstance(part, dict):
                attachments.append(str(part.get("type") or "part"))
            else:
                texts.append(str(part))
        return "\n".join(texts), attachments
    return json.dumps(content, default=str), []


def _pretty_json(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
