"""LLM calls recorded by the interceptor: one row per call, with usage and cost."""

from __future__ import annotations

from django.db import models

from jobs.models import RolloutAttempt

# `LLMCall.error` begins with this when the interceptor refused a call because the job's budget
# was spent (http_status 429); the API calls it `budget_exceeded` too.
BUDGET_EXCEEDED = "budget_exceeded"
# ...and this when one rollout reached one of its job's `rollout_limits` (http_status 429).
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


class LLMCall(models.Model):
    attempt = models.ForeignKey(RolloutAttempt, on_delete=models.CASCADE, related_name="llm_calls")
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
    started_at = models.DateTimeField()
    ttft_ms = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["attempt", "seq"]
        indexes = [models.Index(fields=["attempt", "seq"])]


class TraceMember(models.Model):
    """A finished seed's trace document as the traces zip holds it (redacted, indented,
    deflated), kept so a zip is assembled rather than built; `key` says what it was built from
    (traces.members), and a member whose key no longer matches is built again."""

    seed_run = models.OneToOneField(
        "jobs.SeedRun", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    key = models.CharField(max_length=32)
    crc = models.BigIntegerField()
    size = models.BigIntegerField()
    num_llm_calls = models.PositiveIntegerField()
    data = models.BinaryField()
