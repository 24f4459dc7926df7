"""LLM calls recorded by the interceptor: one row per call, with usage and cost."""

from __future__ import annotations

from django.db import models

from jobs.models import RolloutAttempt

# `LLMCall.error` begins with this when the interceptor refused a call because the job's budget
# was spent (http_status 429); the API calls it `budget_exceeded` too.
BUDGET_EXCEEDED = "budget_exceeded"


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
    request = models.JSONField(default=dict)
    response = models.JSONField(null=True, blank=True)

    prompt_tokens = models.BigIntegerField(null=True, blank=True)
    completion_tokens = models.BigIntegerField(null=True, blank=True)
    cached_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)
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
