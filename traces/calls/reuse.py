"""What a rerun carries over with a reused sample beside its attempts: the attempts' LLM calls,
so the new job's traces, tokens and costs include the reused samples (jobs.reruns)."""

from __future__ import annotations

from traces.models import LLMCall

BATCH = 500
_SKIPPED = {"id", "attempt_id"}


def llm_calls_copy(attempt_ids: dict[int, int]) -> int:
    """Copy the LLM calls of each attempt in `attempt_ids` (old id -> new id) to the new
    attempt; returns how many were copied."""
    if not attempt_ids:
        return 0
    names = [f.attname for f in LLMCall._meta.concrete_fields if f.attname not in _SKIPPED]
    copied = 0
    old_ids = list(attempt_ids)
    for start in range(0, len(old_ids), BATCH):
        calls = LLMCall.objects.filter(attempt_id__in=old_ids[start : start + BATCH])
        copies = [
            LLMCall(attempt_id=attempt_ids[c.attempt_id], **{n: getattr(c, n) for n in names})
            for c in calls.order_by("id")
        ]
        LLMCall.objects.bulk_create(copies, batch_size=BATCH)
        copied += len(copies)
    return copied
