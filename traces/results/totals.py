"""Per-seed and per-job totals: tokens, cost, calls and budget refusals summed over the LLM
calls (a job's result rows and its summary are made of them in `traces.results.result_rows`).
The only place that sums LLM calls: in the database (`_AGGREGATES`), or in memory for calls
already read (`usage_from_calls`, and `Spent`, what the interceptor's budget and rollout-limit
checks count).

One rule holds everywhere: a cost that is unknown is never a silent 0. One call of a model
without a known price makes its seed's `cost_usd` null (`cost_unknown: true`), and one such seed
makes the job's `total_cost_usd` null. A call lost with its web process (`CallState.LOST`: it
reached the provider, its answer was never recorded) has unknown usage: it is counted apart
(`llm_calls_usage_unknown`), its tokens are not in the sums, and its cost makes the cost
unknown the same way. The interceptor's budget check is the exception by
design: it counts unknown prices as 0, since it can only refuse on what it knows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection, models
from django.db.models import BigIntegerField, Count, FloatField, Q, QuerySet, Sum, Value
from django.db.models.functions import Cast, Coalesce, NullIf

from jobs.among import Among
from jobs.models import EvalJob, SeedRun
from traces.calls.replay import NO_REPLAY, NOT_LIVE, Replayed, replayed_sum
from traces.models import (
    RETRIED_MARK,
    ROLLOUT_LIMITS,
    CallKind,
    CallState,
    LLMCall,
    Refusal,
    ReplayMark,
)


@dataclass(frozen=True)
class Usage:
    """What a set of LLM calls spent."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Prompt tokens served from the provider's cache (part of prompt_tokens).
    cached_tokens: int = 0
    #: Completion tokens spent reasoning (part of completion_tokens).
    reasoning_tokens: int = 0
    total_tokens: int = 0
    #: USD; None when any call's price is unknown.
    cost_usd: float | None = 0.0
    num_llm_calls: int = 0
    #: Calls the interceptor refused because the job's budget was spent.
    budget_refusals: int = 0
    #: The per-rollout limit (`rollout_limits`) that refused a call, if one did.
    rollout_limit: str | None = None
    #: Calls lost with their web process: their tokens are not in the sums above.
    usage_unknown: int = 0
    #: In a replay (traces.calls.replay): calls answered from their recording (their tokens
    #: are in the sums, their cost is not: they spent nothing), calls a provider answered,
    #: calls that missed their recording, and what the replayed calls cost when recorded.
    replay: Replayed = NO_REPLAY

    @classmethod
    def from_kept(cls, data: dict[str, Any]) -> Usage:
        """A Usage kept as JSON (jobs.figures), its replay figures (if any) made whole."""
        return cls(**{**data, "replay": Replayed(**data.get("replay") or {})})

    @property
    def cost_unknown(self) -> bool:
        return self.cost_usd is None

    def row_fields(self) -> dict[str, Any]:
        """The usage columns of a result row (GET /results, the dashboard, the zip)."""
        return {
            "tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
            "cost_unknown": self.cost_unknown,
            "num_llm_calls": self.num_llm_calls,
            "budget_exceeded": bool(self.budget_refusals),
            "rollout_limit": self.rollout_limit,
            "llm_calls_usage_unknown": self.usage_unknown,
            **self.replay.row_fields(),
        }


NO_USAGE = Usage()

_TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
                 "total_tokens")  # fmt: skip
# Summed by the database, per group of calls. A token sum comes as an int, 0 over no value: on
# PostgreSQL the SUM of a bigint column is a numeric, which psycopg reads as a Decimal, and
# turning five of them into ints was a tenth of a job's summary (`_usage_of` runs per sample).
_AGGREGATES = {
    **{name: Cast(Sum(name, default=0), BigIntegerField()) for name in _TOKEN_FIELDS},
    "cost": Sum("cost_usd"),
    "unknown": Count("id", filter=Q(cost_unknown=True)),
    "calls": Count("id"),
    "lost": Count("id", filter=Q(state=CallState.LOST)),
    "refused": Count("id", filter=Q(refusal=Refusal.BUDGET)),
    **{f"limit_{name}": Count("id", filter=Q(refusal=name)) for name in ROLLOUT_LIMITS},
    "replayed": Count("id", filter=Q(replay=ReplayMark.REPLAYED)),
    "replayed_cost": Sum("replayed_cost_usd", filter=Q(replay=ReplayMark.REPLAYED)),
    "replayed_unknown": Count(
        "id", filter=Q(replay=ReplayMark.REPLAYED, replayed_cost_usd__isnull=True)
    ),
    # Calls a provider answered: not replayed, not refused by the interceptor.
    "live": Count("id", filter=~Q(replay__in=NOT_LIVE) & Q(refusal=Refusal.NONE)),
    "diverged": Count("id", filter=Q(replay__in=(ReplayMark.LIVE, ReplayMark.REFUSED))),
}


# Where each of `_AGGREGATES` is in a row of them, and what an absent one counts as.
_AT = {name: n for n, name in enumerate(_AGGREGATES)}
_ABSENT = {"replayed": 0, "replayed_cost": 0.0, "replayed_unknown": 0, "live": 0, "diverged": 0}
_LIMITS_AT = tuple((name, _AT[f"limit_{name}"]) for name in ROLLOUT_LIMITS)
_TOKENS_END = len(_TOKEN_FIELDS)  # the token sums come first
_COST, _UNKNOWN, _CALLS = _AT["cost"], _AT["unknown"], _AT["calls"]
_LOST, _REFUSED = _AT["lost"], _AT["refused"]
_REPLAYED, _REPLAYED_COST = _AT["replayed"], _AT["replayed_cost"]
_REPLAYED_UNKNOWN, _LIVE, _DIVERGED = _AT["replayed_unknown"], _AT["live"], _AT["diverged"]


def _usage(**sums: Any) -> Usage:
    """A Usage from `_AGGREGATES`' sums by name (an absent replay figure counts none)."""
    return _usage_of(tuple(sums[name] if name in sums else _ABSENT[name] for name in _AT))


def _usage_of(sums: tuple) -> Usage:
    """A Usage from a row of `_AGGREGATES`' sums in their order, as the database gives them
    (the token sums ints; the cost a float, NULL over no value). Taken by position, with no
    dict of names on the way: the result rows make one per sample and kind, for every
    summary, results read and export."""
    prompt, completion, cached, reasoning, total = sums[:_TOKENS_END]
    limit = next((name for name, at in _LIMITS_AT if sums[at]), None)
    replayed_cost = None if sums[_REPLAYED_UNKNOWN] else sums[_REPLAYED_COST] or 0.0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        reasoning_tokens=reasoning,
        total_tokens=total,
        cost_usd=None if sums[_UNKNOWN] else float(sums[_COST] or 0.0),
        num_llm_calls=sums[_CALLS],
        budget_refusals=sums[_REFUSED],
        rollout_limit=limit,
        usage_unknown=sums[_LOST],
        replay=Replayed(sums[_REPLAYED], sums[_LIVE], sums[_DIVERGED], replayed_cost),
    )


def usage_sum(usages: Iterable[Usage]) -> Usage:
    """Several sums as one: tokens and calls added, the cost unknown when any is."""
    usages = list(usages)
    costs = [u.cost_usd for u in usages]
    return Usage(
        **{name: sum(getattr(u, name) for u in usages) for name in _TOKEN_FIELDS},
        cost_usd=None if None in costs else sum(costs),
        num_llm_calls=sum(u.num_llm_calls for u in usages),
        budget_refusals=sum(u.budget_refusals for u in usages),
        rollout_limit=next((u.rollout_limit for u in usages if u.rollout_limit), None),
        replay=replayed_sum(u.replay for u in usages),
    )


def usage_from_calls(calls: Iterable[LLMCall]) -> Usage:
    """The same figures the database sums in `seed_usage`, from calls already in memory."""
    calls = list(calls)
    if not calls:
        return NO_USAGE
    return _usage(
        **{name: sum(getattr(c, name) or 0 for c in calls) for name in _TOKEN_FIELDS},
        cost=sum(c.cost_usd or 0.0 for c in calls),
        unknown=sum(1 for c in calls if c.cost_unknown),
        calls=len(calls),
        lost=sum(1 for c in calls if c.state == CallState.LOST),
        refused=sum(1 for c in calls if c.refusal == Refusal.BUDGET),
        **{f"limit_{name}": sum(1 for c in calls if c.refusal == name) for name in ROLLOUT_LIMITS},
        replayed=len(replayed := [c for c in calls if c.replay == ReplayMark.REPLAYED]),
        replayed_cost=sum(c.replayed_cost_usd or 0.0 for c in replayed),
        replayed_unknown=sum(1 for c in replayed if c.replayed_cost_usd is None),
        live=sum(1 for c in calls if c.replay not in NOT_LIVE and c.refusal == Refusal.NONE),
        diverged=sum(1 for c in calls if c.replay in (ReplayMark.LIVE, ReplayMark.REFUSED)),
    )  # fmt: skip


def seed_usage(
    *, job: EvalJob, seed_run: SeedRun | None = None, kind: str = CallKind.POLICY
) -> dict[int, Usage]:
    """Usage per seed run id over every attempt (failed attempts too: their tokens were
    spent), for the whole job or one of its seed runs. Seed runs without calls are absent.
    The policy's calls, or with `kind="judge"` the verifier's (reported beside, never inside)."""
    calls = LLMCall.objects.filter(attempt__seed_run__job=job, kind=kind)
    if seed_run is not None:
        calls = calls.filter(attempt__seed_run=seed_run)
    return _per_seed_run(calls)


def _per_seed_run(calls) -> dict[int, Usage]:
    rows = calls.values("attempt__seed_run_id").annotate(**_AGGREGATES).order_by()
    return {r.pop("attempt__seed_run_id"): _usage(**r) for r in rows}


def usage_by_seed_run_and_kind(seed_run_ids: list[int]) -> dict[tuple[int, str], Usage]:
    """Usage of each of these seed runs' calls by (seed run id, kind), in one query (the ids
    as one parameter, `Among`): the result rows' usage, a thousand seed runs at a time. The
    ORM's statement, run on a cursor: its rows go to `_usage_of` as they come (its sums and
    counts made numbers there), not through a converter per value and a dict per row. On
    PostgreSQL the statement is built once (`_usage_statement`): whatever the ids, its text is
    the same, and Django building it was a third of this function's CPU."""
    if connection.vendor == "postgresql" and seed_run_ids:
        sql, params, at = _usage_statement()
        params = [*params[:at], list(seed_run_ids), *params[at + 1 :]]
    else:
        sql, params = _usage_query(Among("attempt__seed_run_id", seed_run_ids))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {(row[0], row[1]): _usage_of(row[2:]) for row in rows}


def _usage_query(among: Among) -> tuple[str, tuple]:
    calls = LLMCall.objects.filter(among)
    query = calls.values("attempt__seed_run_id", "kind").annotate(**_AGGREGATES).order_by()
    return query.query.sql_with_params()


@cache
def _usage_statement() -> tuple[str, tuple, int]:
    """PostgreSQL: `usage_by_seed_run_and_kind`'s statement, its parameters, and which of them
    holds the ids (found by identity: `Among` passes its list as one parameter)."""
    among = Among("attempt__seed_run_id", [0])
    sql, params = _usage_query(among)
    return sql, params, next(n for n, p in enumerate(params) if p is among.values)


def job_usage_many(*, job_ids: list[str]) -> dict[str, Usage]:
    """Usage of each of several jobs, in one query."""
    calls = LLMCall.objects.filter(attempt__seed_run__job_id__in=job_ids, kind=CallKind.POLICY)
    rows = calls.values("attempt__seed_run__job_id").annotate(**_AGGREGATES).order_by()
    found = {r.pop("attempt__seed_run__job_id"): _usage(**r) for r in rows}
    return {job_id: found.get(job_id, NO_USAGE) for job_id in job_ids}


def seed_run_usage_sql() -> dict[str, Any]:
    """Per seed run, as the database computes it (for sorting), the `tokens` and `cost_usd` of
    its result row: its policy calls' sums, 0 without calls, the cost null when one is unknown."""
    calls = LLMCall.objects.filter(attempt__seed_run=models.OuterRef("pk"), kind=CallKind.POLICY)
    calls = calls.values("attempt__seed_run").order_by()
    total, cost = (
        models.Subquery(calls.annotate(v=_AGGREGATES[name]).values("v"))
        for name in ("total_tokens", "cost")
    )
    known = Coalesce(cost, 0.0, output_field=FloatField())
    unknown = models.Exists(calls.filter(cost_unknown=True))
    return {"tokens": Coalesce(total, 0),
            "cost_usd": models.Case(models.When(unknown, then=None), default=known,
                                    output_field=FloatField())}  # fmt: skip


def job_cost_sql() -> models.Case:
    """Per job, as the database computes it (for sorting the jobs list), what its policy's calls
    cost (`job_usage_many`'s `cost_usd`): 0 without calls, null when a price is unknown."""
    calls = LLMCall.objects.filter(
        attempt__seed_run__job=models.OuterRef("pk"), kind=CallKind.POLICY
    )
    calls = calls.values("attempt__seed_run__job").order_by()
    cost = models.Subquery(calls.annotate(v=_AGGREGATES["cost"]).values("v"))
    unknown = models.Exists(calls.filter(cost_unknown=True))
    known = Coalesce(cost, 0.0, output_field=FloatField())
    return models.Case(models.When(unknown, then=None), default=known, output_field=FloatField())


@dataclass
class Spent:
    """Tokens and USD recorded so far, unknown prices counting 0: what the interceptor's job
    budget and per-rollout limits are checked against (see the module's docstring). A call in
    flight or lost counts 0 too: what it spent is not known (the call counts still hold:
    `max_llm_calls` is counted as calls are let through, `llm_calls_admitted`)."""

    tokens: int = 0
    cost: float = 0.0

    def add(self, call: LLMCall) -> None:
        """Count in a call about to be recorded."""
        self.tokens += call.total_tokens or 0
        self.cost += call.cost_usd or 0.0

    def at_least(self, other: Spent) -> None:
        """Spending only grows: keep the larger of each figure (the database may not have this
        process's newest calls yet, nor this process the other processes')."""
        self.tokens, self.cost = max(self.tokens, other.tokens), max(self.cost, other.cost)


def _spent(calls: QuerySet[LLMCall]) -> Spent:
    sums = calls.aggregate(tokens=_AGGREGATES["total_tokens"], cost=_AGGREGATES["cost"])
    return Spent(int(sums["tokens"] or 0), float(sums["cost"] or 0.0))


def job_spent(*, job_id: str) -> Spent:
    """What every call of the job recorded so far spent, for its budget."""
    return _spent(LLMCall.objects.filter(attempt__seed_run__job_id=job_id))


def attempt_spent(*, attempt_id: int) -> Spent:
    """What one attempt's calls recorded by every web process spent, for its per-rollout token
    and cost limits. Refused calls, and failed tries that were retried, are not calls of their
    own."""
    calls = LLMCall.objects.filter(attempt_id=attempt_id, refusal=Refusal.NONE)
    return _spent(calls.exclude(error__contains=RETRIED_MARK))


def job_usage_by_model(*, job: EvalJob) -> dict[tuple[str, str], Usage]:
    """Usage of the job's calls per (kind, model): the policy's calls apart from the judge's,
    the model the one that answered, else the one asked for."""
    model = Coalesce(
        NullIf("model_answered", Value("")), NullIf("model_requested", Value("")), Value("?")
    )
    rows = (
        LLMCall.objects.filter(attempt__seed_run__job=job)
        .annotate(model_name=model)
        .values("kind", "model_name")
        .annotate(**_AGGREGATES)
        .order_by()
    )
    return {(r.pop("kind"), r.pop("model_name")): _usage(**r) for r in rows}
