"""A job's per-rollout limits, `rollout_limits: {max_llm_calls, max_tokens, max_cost_usd}`:
what one rollout attempt may spend through the interceptor (traces/interceptor/limits.py
enforces them)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

LIMITS = {"max_llm_calls": int, "max_tokens": int, "max_cost_usd": float}


def rollout_limits_validate(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The limits as given, each a number > 0 (counts whole); None or {} for none."""
    if not value:
        return None
    unknown = sorted(set(value) - set(LIMITS))
    if unknown:
        raise serializers.ValidationError(f"unknown limit {unknown[0]!r}; use {', '.join(LIMITS)}")
    out = {}
    for name, number in value.items():
        if number is None:
            continue
        whole = LIMITS[name] is int
        ok = isinstance(number, int) if whole else isinstance(number, int | float)
        if isinstance(number, bool) or not ok or not 0 < number <= 1e12:
            kind = "a whole number" if whole else "a number"
            raise serializers.ValidationError(f"{name} must be {kind} > 0")
        out[name] = number
    return out or None
