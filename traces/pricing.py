"""The cost of one LLM call, from genai-prices or an operator's own price for the model.

genai-prices counts `cache_read_tokens` inside `input_tokens` (billed at the cache-read price
instead of the input price) and `output_reasoning_tokens` inside `output_tokens` (billed once,
at the output price unless the model has a reasoning price of its own). OpenAI's usage has the
same shape: `prompt_tokens_details.cached_tokens` is part of `prompt_tokens` and
`completion_tokens_details.reasoning_tokens` part of `completion_tokens`, so the counts go in
as they come. Anthropic's cache writes (`cache_creation_input_tokens`) are counted inside
`prompt_tokens` too (traces.wire) and go in as `cache_write_tokens`, billed at the model's
cache-write price, as Anthropic bills them.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from django.conf import settings
from genai_prices import Usage, calc_price

log = logging.getLogger(__name__)
_MTOK = Decimal(1_000_000)


def call_cost(
    *,
    model: str,
    price_provider: str | None,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """USD cost of a call, or None when the model's price is unknown (never a made-up 0)."""
    own = settings.EVALHUB_MODEL_PRICES.get(model)
    if own is not None:
        cached = min(cached_tokens, prompt_tokens)
        written = min(cache_write_tokens, prompt_tokens - cached)
        cache_price = Decimal(str(own.get("cache_read_per_mtok", own["input_per_mtok"])))
        write_price = Decimal(str(own.get("cache_write_per_mtok", own["input_per_mtok"])))
        total = (
            (prompt_tokens - cached - written) * Decimal(str(own["input_per_mtok"]))
            + cached * cache_price
            + written * write_price
            + completion_tokens * Decimal(str(own["output_per_mtok"]))
        ) / _MTOK
        return float(total)
    if not price_provider:
        return None
    usage = Usage(
        input_tokens=prompt_tokens,
        output_tokens=completion_tokens,
        cache_read_tokens=min(cached_tokens, prompt_tokens) or None,
        cache_write_tokens=min(
            cache_write_tokens, prompt_tokens - min(cached_tokens, prompt_tokens)
        )
        or None,
        output_reasoning_tokens=min(reasoning_tokens, completion_tokens) or None,
    )
    try:
        price = calc_price(usage, model, provider_id=price_provider)
    except LookupError:
        return None
    except Exception:  # a price library bug must not lose the call's record
        log.exception("pricing failed for model %r at %r", model, price_provider)
        return None
    return float(price.total_price)
