"""LLM calls recorded by the interceptor: one row per call, with usage and cost."""

from __future__ import annotations

from django.db import models

from jobs.models import RolloutAttempt

# The error type the interceptor answers (429) when the job's budget is spent, and its call's
# `error` begins with; the result rows call it `budget_exceeded` too. Read `LLMCall.refusal`.
BUDGET_EXCEEDED = "budget_exceeded"
# ...and when one rollout reached one of its job's `rollout_limits` (429).
ROLLOUT_LIMIT_EXCEEDED = "rollout_limit_exceeded"
# In the error of a failed try the interceptor tried again (it is not billed, nor a call).
RETRIED_MARK = "tried again"
# The per-rollout limits of a job's `rollout_limits`, in the order they are checked.
ROLLOUT_LIMITS = ("max_llm_calls", "max_tokens", "max_cost_usd")
# The wire formats a call can come in (`LLMCall.route`).
ROUTES = ("chat.completions", "responses", "messages", "completions", "embeddings")


class CallKind(models.TextChoices):
    """Who made the call: the policy under evaluation, or the verifier judging its rollout."""

    POLICY = "policy"
    JUDGE = "judge"


class Refusal(models.TextChoices):
    """Why the interceptor refused a call itself, answering 429 without reaching a provider:
    the job's budget was spent, or the rollout reached one of its `rollout_limits` (the limit's
    name). Empty for every other call."""

    NONE = ""
    BUDGET = BUDGET_EXCEEDED
    MAX_LLM_CALLS = "max_llm_calls"
    MAX_TOKENS = "max_tokens"
    MAX_COST_USD = "max_cost_usd"


class CallState(models.TextChoices):
    """Where a call's row stands. The interceptor writes it ahead, `in_flight`, before the call
    reaches a provider and completes it, `done`, with the answer. One still in flight once
    `EVALHUB_LLM_CALL_LOST_S` passed since it started was lost with its web process (killed
    while the call was out): `lost`, its usage unknown (tokens null, `cost_unknown`), never 0.
    An answer that still comes completes it as usual."""

    DONE = "done"
    IN_FLIGHT = "in_flight"
    LOST = "lost"


class ReplayMark(models.TextChoices):
    """How a call of a replay (traces.calls.replay) was answered: from its recording
    (`replayed`: nothing spent), or, not matching it, by the provider (`live`, on_miss "call")
    or with the divergence error (`refused`, on_miss "fail"). Empty for a job replaying nothing."""

    NONE = ""
    REPLAYED = "replayed"
    LIVE = "live"
    REFUSED = "refused"


class LLMCall(models.Model):
    # Indexed by (attempt, seq) alone: a call's row is written twice (ahead, then completed).
    attempt = models.ForeignKey(
        RolloutAttempt, on_delete=models.CASCADE, related_name="llm_calls", db_index=False
    )
    # Order of the call within its attempt (1, 2, ...).
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=CallKind.choices, default=CallKind.POLICY)
    provider = models.CharField(max_length=64, default="openai")
    model_requested = models.CharField(max_length=255, blank=True, default="")
    model_answered = models.CharField(max_length=255, blank=True, default="")
    stream = models.BooleanField(default=False)
    # Which API the call spoke (one of ROUTES): its request and response are in that format.
    route = models.CharField(max_length=32, default="chat.completions")
    request = models.JSONField(default=dict)
    response = models.JSONField(null=True, blank=True)

    prompt_tokens = models.BigIntegerField(null=True, blank=True)
    completion_tokens = models.BigIntegerField(null=True, blank=True)
    cached_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)
    # Prompt tokens written to the provider's cache (Anthropic bills them above input); part of
    # prompt_tokens, like cached_tokens (the ones read from it).
    cache_write_tokens = models.BigIntegerField(null=True, blank=True)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    usage_estimated = models.BooleanField(default=False)
    cost_usd = models.FloatField(null=True, blank=True)
    # True when the price of the model is unknown: cost_usd is null on purpose, never 0.
    cost_unknown = models.BooleanField(default=False)

    http_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    refusal = models.CharField(
        max_length=16, choices=Refusal.choices, blank=True, default=Refusal.NONE, db_default=""
    )
    state = models.CharField(
        max_length=9, choices=CallState.choices, default=CallState.DONE, db_default="done"
    )
    started_at = models.DateTimeField()
    ttft_ms = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    # The W3C traceparent the caller sent with the call, if any (traces.otel.context): the
    # exported call's span is a child of the caller's own span.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")
    # In a replay: how the call was answered (ReplayMark); a replayed call's cost_usd is 0 (it
    # spent nothing) and what it cost when recorded is `replayed_cost_usd` (null: unknown).
    replay = models.CharField(
        max_length=8, choices=ReplayMark.choices, blank=True, default="", db_default=""
    )
    replayed_cost_usd = models.FloatField(null=True, blank=True)
    # A live call of a job with a `cache`: the key its answer is found again by
    # (traces.calls.replay.cache_key); empty for every other call.
    request_hash = models.CharField(max_length=64, blank=True, default="", db_default="")

    class Meta:
        ordering = ["attempt", "seq"]
        indexes = [
            models.Index(fields=["attempt", "seq"]),
            # The calls in flight, for the sweep that finds the lost ones (a few rows).
            models.Index(
                fields=["started_at"],
                condition=models.Q(state=CallState.IN_FLIGHT),
                name="llmcall_in_flight",
            ),
            # The cache's answers (a few rows: only the calls of jobs with a cache have a key).
            models.Index(
                fields=["request_hash"],
                condition=~models.Q(request_hash=""),
                name="llmcall_request_hash",
            ),
        ]


class TraceMember(models.Model):
    """A finished seed's trace document as the traces zip holds it (redacted, indented,
    deflated), kept so a zip is assembled rather than built; `key` says what it was built from
    (traces.zip.members), and a member whose key no longer matches is built again."""

    seed_run = models.OneToOneField(
        "jobs.SeedRun", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    key = models.CharField(max_length=32)
    crc = models.BigIntegerField()
    size = models.BigIntegerField()
    num_llm_calls = models.PositiveIntegerField()
    data = models.BinaryField()
    # The sample's trace was handed to the OpenTelemetry export (traces.otel.export): once,
    # when the sample and its verdict were final.
    exported = models.BooleanField(default=False, db_default=False)
