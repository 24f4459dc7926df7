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
from traces import totals
from traces.conversation import as_chat
from traces.messages import assistant_message, reasoning_of, split_think
from traces.models import LLMCall
from traces.redaction import Redactor

# --- API keys ---------------------------------------------------------------------------------


def api_key_list(*, user: AbstractBaseUser) -> QuerySet[ApiKey]:
    """The user's keys, live ones first, newest first."""
    return ApiKey.objects.filter(user=user).order_by(
        F("revoked_at").asc(nulls_first=True), "-created_at"
    )


# --- jobs list ------------------------------------------------------------------------------


def job_list_figures(*, jobs: list[EvalJob]) -> dict[str, dict[str, Any]]:
    """Progress, mean score, tokens and cost of each job of a page, in three queries."""
    ids = [job.id for job in jobs]
    progress = job_selectors.job_progress_many(jobs=jobs)
    means = totals.job_mean_scores(job_ids=ids)
    usage = totals.job_usage_many(job_ids=ids)
    figures = {}
    for job in jobs:
        p = progress[job.id]
        figures[job.id] = {
            "progress": progress_bar(
                succeeded=p["succeeded"], failed=p["failed"], total=p["total"]
            ),
            "mean_score": means.get(job.id),
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


def job_duration_s(*, job: EvalJob, now: datetime | None = None) -> float | None:
    """Seconds from start to end, or to now while the job runs; None before it starts."""
    if job.started_at is None:
        return None
    end = job.completed_at or (None if job.is_terminal else (now or timezone.now()))
    if end is None:
        return None
    return max(0.0, (end - job.started_at).total_seconds())


def job_progress_many(*, owner: AbstractBaseUser, job_ids: list[str]) -> dict[str, Any]:
    """Status and progress of several of the owner's jobs (the jobs list polls this)."""
    jobs = list(EvalJob.objects.filter(owner=owner, pk__in=job_ids[:200]))
    figures = job_list_figures(jobs=jobs)
    return {
        job.id: {
            "status": job.status,
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


def seed_attempts(*, seed_run: SeedRun, redactor: Redactor) -> list[AttemptView]:
    """Every attempt of the seed, oldest first, each with its conversation, redacted."""
    attempts = list(RolloutAttempt.objects.filter(seed_run=seed_run).order_by("number"))
    calls: dict[int, list[LLMCall]] = {a.id: [] for a in attempts}
    # The policy's conversation; the verifier's judge calls are on the verdict (jobs/verifier/).
    policy = LLMCall.objects.filter(attempt__seed_run=seed_run, kind="policy")
    for call in policy.order_by("attempt_id", "seq"):
        calls[call.attempt_id].append(call)
    return [
        AttemptView(
            attempt=a,
            steps=conversation_steps(calls=calls[a.id], redactor=redactor),
            error=redactor.text(a.error or ""),
        )
        for a in attempts
    ]


def conversation_steps(*, calls: list[LLMCall], redactor: Redactor) -> list[CallStep]:
    """Each call's request repeats the history; show only what is new since the previous call
    and its answer. When a request does not continue the history (the task app trimmed or
    rewrote it), show that request whole and say so."""
    steps = []
    history: list[str] = []
    tool_names: dict[str, str] = {}
    for call in calls:
        request, response = redactor.value(call.request), redactor.value(call.response)
        # Every wire format as chat (a call without a route is a chat completion).
        route = getattr(call, "route", "chat.completions")
        request, response = as_chat(route, request, response)
        raw = request.get("messages") if isinstance(request, dict) else None
        raw = raw if isinstance(raw, list) else []
        keys = [_canonical(m) for m in raw]
        continues = keys[: len(history)] == history
        new_raw = raw[len(history) :] if continues else raw
        answer_raw, finish = assistant_message(response)
        new_messages = [message_from_openai(m) for m in new_raw]
        answer = [message_from_openai(answer_raw)] if answer_raw else []
        for m in new_messages + answer:
            for tc in m.tool_calls:
                tool_names[tc.id] = tc.name
            if m.role == "tool" and not m.name:
                m.name = tool_names.get(m.tool_call_id, "")
        steps.append(
            CallStep(
                call=call,
                new_messages=new_messages,
                history_rewritten=bool(history) and not continues,
                answer=answer,
                finish_reason=finish,
                error=redactor.text(call.error or ""),
            )
        )
        history = keys + ([_canonical(answer_raw)] if answer_raw else [])
    return steps


def _canonical(message: Any) -> str:
    if isinstance(message, dict):
        # Clients echo assistant messages back with fields added or dropped (refusal: null,
        # annotations: []...); compare what the conversation is made of.
        message = {
            k: message.get(k)
            for k in ("role", "content", "tool_calls", "tool_call_id")
            if message.get(k) not in (None, [], "")
        }
    return json.dumps(message, sort_keys=True, default=str)


def message_from_openai(raw: Any) -> Message:
    if not isinstance(raw, dict):
        return Message(role="unknown", text=json.dumps(raw, default=str))
    text, attachments = _content_text(raw.get("content"))
    # What counts as reasoning is decided in traces.messages (the trace documents use it too).
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
