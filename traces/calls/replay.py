"""Replaying a job's recorded LLM answers (docs/replay.md): the one home of what a replay is.

A replay job (`EvalJob.replay_of`) runs its samples again; the interceptor answers each LLM call
of a sample from the recording of that same sample (seed, repeat) in the replayed job: the n-th
call of the attempt against the n-th recorded call of the sample's succeeded attempt (its last
attempt when none succeeded). The interceptor's own retries are not calls of the recording.

Requests are compared after a normalisation (`normalised`): the order of keys does not count
(JSON objects are compared as mappings), the interceptor's tokens (in its URL or anywhere in a
text) read as one placeholder, and the fields that never change an answer are left out
(`NEVER_CHANGE_AN_ANSWER`: whether it streams, who asks, what to store). A call whose request is
recorded under another number and not answered yet (calls made in parallel arrive in any order)
is answered by that recording. Any other call is a miss: with `on_miss` "fail" it is answered
an error and the sample fails with a divergence report (`divergence`: the call's number, the
JSON path of the first difference, both values redacted and shortened); with "call" the
provider answers it.

The verifier's judge is replayed too, in a replay and in a re-judgement (`judge_tape_load`,
`judge_match`): its calls are matched by their request alone against the sample's recorded judge
calls over the job's lineage (the job replayed or re-judged, then that one's, ...).

A replayed call spends nothing: its row has the recorded tokens, `cost_usd` 0 and what it cost
when recorded as `replayed_cost_usd` (`replayed_call`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import F
from django.utils import timezone

from jobs.models import AttemptStatus, EvalJob, RolloutAttempt, SeedRun
from traces.calls.call_rows import call_new
from traces.models import RETRIED_MARK, CallKind, CallState, LLMCall, ReplayMark
from traces.redaction import server_redactor
from traces.tokens import TOKEN_RE

ON_MISS = ("fail", "call")
# The error type a call that missed its recording is answered with (422: neither the OpenAI
# nor the Anthropic SDKs try it again), and that its row's error begins with.
REPLAY_DIVERGENCE = "replay_divergence"
# Request fields that never change an answer: how it is delivered (a stream or not: a replay
# answers in the form asked), who asked, what the provider keeps of it.
NEVER_CHANGE_AN_ANSWER = frozenset({
    "stream", "stream_options", "user", "metadata", "store", "service_tier",
    "prompt_cache_key", "prompt_cache_retention", "safety_identifier",
})  # fmt: skip
TOKEN_PLACEHOLDER = "<interceptor token>"
SHOWN_CHARS = 120
_ABSENT = "<absent>"
_USAGE = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
          "cache_write_tokens", "total_tokens", "usage_estimated")  # fmt: skip


def normalised(value: Any) -> Any:
    """A request as replays compare it (see the module's docstring)."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if k not in NEVER_CHANGE_AN_ANSWER}
    return _normal(value)


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return TOKEN_RE.sub(TOKEN_PLACEHOLDER, value) if "ehi_" in value else value
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def first_difference(recorded: Any, now: Any, path: str = "$") -> tuple[str, Any, Any] | None:
    """(JSON path, recorded value, value now) of the first place two normalised requests
    differ (keys in sorted order, list items in order), or None when they are equal."""
    if recorded == now:
        return None
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in sorted(set(recorded) | set(now), key=str):
            found = first_difference(
                recorded.get(key, _ABSENT), now.get(key, _ABSENT), f"{path}.{key}"
            )
            if found:
                return found
    if isinstance(recorded, list) and isinstance(now, list):
        for i in range(max(len(recorded), len(now))):
            found = first_difference(
                recorded[i] if i < len(recorded) else _ABSENT,
                now[i] if i < len(now) else _ABSENT,
                f"{path}[{i}]",
            )
            if found:
                return found
    return path, recorded, now


def shown(value: Any) -> str:
    """A value of a divergence report: redacted, at most SHOWN_CHARS characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = server_redactor().text(text)
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 1]}…"


@dataclass(frozen=True)
class Recorded:
    """One recorded call a replay may answer with."""

    seq: int
    route: str
    request: Any  # normalised
    response: Any
    http_status: int | None
    error: str | None
    provider: str
    model_answered: str
    usage: tuple  # _USAGE's values
    cost_usd: float | None  # what it cost when recorded; None: unknown


@dataclass
class Tape:
    """A sample's recorded calls, read once per attempt (and web process)."""

    seed: int
    repeat: int
    calls: tuple[Recorded, ...]
    # The recorded calls this process answered: one answers a call out of its order only once.
    used: set[int] = field(default_factory=set)

    def match(self, number: int, route: str, request: dict) -> tuple[Recorded | None, dict]:
        """(the recorded call answering call `number` of the attempt, {}) or (None, the
        divergence report)."""
        now = normalised(request)
        if not 1 <= number <= len(self.calls):
            found = ("$", f"<{len(self.calls)} calls recorded>", f"call {number}")
        elif (rec := self.calls[number - 1]).route != route:
            found = ("route", rec.route, route)
        else:
            found = first_difference(rec.request, now)
            if found is None and rec.response is not None:
                self.used.add(rec.seq)
                return rec, {}
            found = found or ("$", "<no answer was recorded>", "<a request>")
        for rec in self.calls:  # its request recorded under another number, not answered yet
            if rec.seq not in self.used and rec.route == route and rec.request == now:
                if rec.response is not None:
                    self.used.add(rec.seq)
                    return rec, {}
        return None, divergence(self, number, *found)


def divergence(
    tape: Tape, number: int, path: str, recorded: Any, now: Any, *, judge: bool = False
) -> dict[str, Any]:
    """The report of a call that missed its recording (a policy call's, or the judge's)."""
    was, is_now = shown_pair(recorded, now)
    report = {"seed": tape.seed, "repeat": tape.repeat, "call": number, "path": path,
              "recorded": was, "now": is_now}  # fmt: skip
    where = f"the judge's call {number}" if judge else f"call {number}"
    report["message"] = (
        f"replay diverged at {where} of seed {tape.seed} repeat {tape.repeat}: "
        f"{path} was {was}, is now {is_now}"
    )
    return report


def shown_pair(recorded: Any, now: Any) -> tuple[str, str]:
    """Both values of a report; two long texts (a judge's prompt) from a little before the
    first character where they differ, so the difference is what is shown, their line breaks
    as `\\n`."""
    if not (isinstance(recorded, str) and isinstance(now, str)):
        return shown(recorded), shown(now)
    recorded, now = server_redactor().text(recorded), server_redactor().text(now)
    at = next((i for i, (a, b) in enumerate(zip(recorded, now, strict=False)) if a != b),
              min(len(recorded), len(now)))  # fmt: skip
    start = max(0, at - SHOWN_CHARS // 4)
    if start < 10 or max(len(recorded), len(now)) <= SHOWN_CHARS:
        return shown(recorded), shown(now)
    cut = (f"…{text[start:]}".replace("\n", "\\n") for text in (recorded, now))  # one line
    return shown(next(cut)), shown(next(cut))


def judge_match(tape: Tape, route: str, request: dict) -> tuple[Recorded | None, dict]:
    """(the recorded judge call answering this one, {}) or (None, the divergence report).

    A judge's calls are matched by their request alone, in any order and as often as asked:
    a judgement (at temperature 0) asks the same thing whenever its rollout and its judge are
    the same, and a judgement run again (a lost lease) asks it again. The report compares the
    call with the nearest recording's call of as many messages (the judge's second try has
    more), else its first."""
    now = normalised(request)
    for rec in tape.calls:
        if rec.route == route and rec.request == now:
            return rec, {}
    asked = len(now.get("messages") or []) if isinstance(now, dict) else 0
    number, found = next(
        ((i, rec) for i, rec in enumerate(tape.calls, 1)
         if isinstance(rec.request, dict) and len(rec.request.get("messages") or []) == asked),
        (1, tape.calls[0] if tape.calls else None),
    )  # fmt: skip
    if found is None:
        diff = ("$", "<no judge call recorded>", "<a request>")
    elif found.route != route:
        diff = ("route", found.route, route)
    else:
        diff = first_difference(found.request, now) or ("$", "?", "?")
    return None, divergence(tape, number, *diff, judge=True)


# --- the figures (summed with the others by traces.results.totals) --------------------------

# Calls no provider answered: replayed, or refused as a miss.
NOT_LIVE = (ReplayMark.REPLAYED, ReplayMark.REFUSED)


@dataclass(frozen=True)
class Replayed:
    """How a sample's (or a job's) calls were answered in a replay (docs/replay.md)."""

    replayed_calls: int = 0
    live_calls: int = 0
    divergences: int = 0
    #: USD the replayed calls cost when recorded; None when any price was unknown.
    replayed_cost_usd: float | None = 0.0

    def row_fields(self) -> dict[str, Any]:
        return {"replayed_calls": self.replayed_calls, "live_calls": self.live_calls,
                "divergences": self.divergences, "replayed_cost_usd": self.replayed_cost_usd}  # fmt: skip


NO_REPLAY = Replayed()


def replayed_sum(replays: Iterable[Replayed]) -> Replayed:
    replays = list(replays)
    costs = [r.replayed_cost_usd for r in replays]
    return Replayed(
        *(sum(getattr(r, n) for r in replays) for n in ("replayed_calls", "live_calls",
                                                         "divergences")),
        replayed_cost_usd=None if None in costs else sum(costs),
    )  # fmt: skip


# --- the database ---------------------------------------------------------------------------


def tape_load(*, attempt_id: int) -> Tape | None:
    """The recorded calls the attempt's sample replays, or None when its job replays nothing."""
    row = (
        RolloutAttempt.objects.filter(pk=attempt_id)
        .values("seed_run__seed", "seed_run__repeat", "seed_run__job__replay_of_id")
        .first()
    )
    if row is None or not row["seed_run__job__replay_of_id"]:
        return None
    seed, repeat = row["seed_run__seed"], row["seed_run__repeat"]
    attempts = RolloutAttempt.objects.filter(
        seed_run__in=SeedRun.objects.filter(
            job_id=row["seed_run__job__replay_of_id"], seed=seed, repeat=repeat
        )
    ).order_by("-number")
    chosen = attempts.filter(status=AttemptStatus.SUCCEEDED).first() or attempts.first()
    if chosen is None:
        return Tape(seed, repeat, ())
    calls = LLMCall.objects.filter(attempt=chosen, kind=CallKind.POLICY).exclude(
        error__contains=RETRIED_MARK
    )
    return Tape(seed, repeat, tuple(_recorded(c) for c in calls.order_by("seq")))


# How far back a judge's recording is looked for: a replay of a re-judgement of a replay...
MAX_LINEAGE = 20


def judge_lineage(job_id: str) -> list[str]:
    """The jobs whose recorded judge calls a job's judge answers from, nearest first: the job
    it replays (`replay_of`) or re-judges (`judged_from`), then that job's own, and so on."""
    found: list[str] = []
    source = job_id
    while len(found) < MAX_LINEAGE:
        row = EvalJob.objects.filter(pk=source).values("replay_of_id", "judged_from_id").first()
        source = row and (row["replay_of_id"] or row["judged_from_id"])
        if not source or source in found or source == job_id:
            return found
        found.append(source)
    return found


def judge_tape_load(*, attempt_id: int) -> Tape | None:
    """The recorded judge calls of the attempt's sample (seed, repeat) that were answered, over
    its job's lineage (`judge_lineage`: nearest job first, each job's in the order they were
    made); None when its job neither replays nor re-judges another."""
    row = (
        RolloutAttempt.objects.filter(pk=attempt_id)
        .values("seed_run__seed", "seed_run__repeat", "seed_run__job_id")
        .first()
    )
    lineage = judge_lineage(row["seed_run__job_id"]) if row else []
    if not lineage:
        return None
    seed, repeat = row["seed_run__seed"], row["seed_run__repeat"]
    calls = LLMCall.objects.filter(
        kind=CallKind.JUDGE, attempt__seed_run__job_id__in=lineage,
        attempt__seed_run__seed=seed, attempt__seed_run__repeat=repeat,
        http_status=200, error__isnull=True, response__isnull=False, state=CallState.DONE,
    ).annotate(source_job=F("attempt__seed_run__job_id"))  # fmt: skip
    nearest = {job_id: i for i, job_id in enumerate(lineage)}
    ordered = sorted(calls, key=lambda c: (nearest[c.source_job], c.id))
    return Tape(seed, repeat, tuple(_recorded(c) for c in ordered))


def _recorded(call: LLMCall) -> Recorded:
    # A replay of a replay answers with what the first recording cost.
    cost = call.replayed_cost_usd if call.replay == ReplayMark.REPLAYED else call.cost_usd
    return Recorded(
        seq=call.seq, route=call.route, request=normalised(call.request), response=call.response,
        http_status=call.http_status, error=call.error, provider=call.provider,
        model_answered=call.model_answered, usage=tuple(getattr(call, n) for n in _USAGE),
        cost_usd=None if call.cost_unknown and call.replay != ReplayMark.REPLAYED else cost,
    )  # fmt: skip


def cache_key(route: str, request: dict, repeat: int) -> str:
    """The key a job's cache (`EvalJob.cache`) finds a call's answer by: its wire format, its
    request as replays compare it, and its sample's repeat index (repeats never share)."""
    text = json.dumps([route, repeat, normalised(request)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def cache_answer(*, key: str, owner_id: int, job_id: str, cache: dict) -> Recorded | None:
    """The newest answered call of the same key within the cache's `ttl_s`, of the same job
    (scope "job") or any job of the same account (scope "account"), never another account's."""
    since = timezone.now() - timedelta(seconds=cache["ttl_s"])
    calls = LLMCall.objects.filter(
        request_hash=key, http_status=200, error__isnull=True, response__isnull=False,
        state=CallState.DONE, started_at__gte=since, attempt__seed_run__job__owner_id=owner_id,
    )  # fmt: skip
    if cache["scope"] == "job":
        calls = calls.filter(attempt__seed_run__job_id=job_id)
    call = calls.order_by("-id").first()
    return None if call is None else _recorded(call)


def replay_call_number(*, attempt_id: int) -> int:
    """The number of the attempt's call now arriving (1, 2, ...): one UPDATE, so the web
    processes sharing an attempt's calls number them as one."""
    table = connection.ops.quote_name(RolloutAttempt._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET replay_calls = replay_calls + 1 WHERE id = %s "
            "RETURNING replay_calls",
            [attempt_id],
        )
        row = cursor.fetchone()
    return row[0] if row else 0


def divergence_keep(*, attempt_id: int, report: dict[str, Any]) -> None:
    """Keep the attempt's first divergence (before its call is answered: the worker reads it
    as the rollout ends, `attempt_divergence`)."""
    RolloutAttempt.objects.filter(pk=attempt_id, replay_divergence__isnull=True).update(
        replay_divergence=report
    )


def attempt_divergence(*, attempt_id: int) -> dict[str, Any] | None:
    return (
        RolloutAttempt.objects.filter(pk=attempt_id)
        .values_list("replay_divergence", flat=True)
        .first()
    )


def replayed_call(record) -> LLMCall:
    """The row of a call answered from its recording (`record.replayed`): the recorded answer
    and tokens, nothing spent."""
    rec: Recorded = record.replayed
    return call_new(
        attempt_id=record.attempt_id, seq=0, kind=record.kind, provider=rec.provider,
        model_requested=str(record.request.get("model") or "")[:255],
        model_answered=rec.model_answered, stream=record.stream, route=record.route,
        request=record.request, response=rec.response, **dict(zip(_USAGE, rec.usage, strict=True)),
        cost_usd=0.0, cost_unknown=False, replayed_cost_usd=rec.cost_usd,
        http_status=rec.http_status, error=rec.error, started_at=record.started_at,
        ttft_ms=record.ttft_ms, latency_ms=record.latency_ms, traceparent=record.traceparent,
        replay=ReplayMark.REPLAYED,
    )  # fmt: skip
