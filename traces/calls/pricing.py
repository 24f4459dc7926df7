"""The cost of one LLM call, from genai-prices or an operator's own price for the model.

genai-prices counts `cache_read_tokens` inside `input_tokens` (billed at the cache-read price
instead of the input price) and `output_reasoning_tokens` inside `output_tokens` (billed once,
at the output price unless the model has a reasoning price of its own). OpenAI's usage has the
same shape: `prompt_tokens_details.cached_tokens` is part of `prompt_tokens` and
`completion_tokens_details.reasoning_tokens` part of `completion_tokens`, so the counts go in
as they come. Anthropic's cache writes (`cache_creation_input_tokens`) are counted inside
`prompt_tokens` too (traces.calls.wire) and go in as `cache_write_tokens`, billed at the model's
cache-write price, as Anthropic bills them.

genai-prices works a price out through its general unit machinery, which cost about a quarter of
the interceptor's record writer. A model whose price has no tiers is linear in the counts, so
its per-token prices are read once from the library itself (`_Linear`, from the library's own
answer for one token of each kind), checked against it on two large usages, and then applied
with the same Decimal arithmetic; tiered prices, and any the check finds different, go through
the library every time. `tests/traces/test_pricing.py` holds the two equal over every model.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from genai_prices import Usage, calc_price
from genai_prices.data_snapshot import get_snapshot
from genai_prices.types import ModelPrice, TieredPrices

from traces.calls.usage import TokenUsage

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
    counts = _Counts.of(prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens,
                        cache_write_tokens)  # fmt: skip
    try:
        linear = _linear_for(model, price_provider)
        if linear is not None:
            return float(linear.total(counts))
        price = calc_price(counts.usage(), model, provider_id=price_provider)
    except LookupError:
        return None
    except Exception:  # a price library bug must not lose the call's record
        log.exception("pricing failed for model %r at %r", model, price_provider)
        return None
    return float(price.total_price)


@dataclass(frozen=True)
class _Counts:
    """A call's counts as genai-prices takes them: cache reads and writes inside the input,
    reasoning inside the output."""

    input: int
    output: int
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int, reasoning: int, written: int):
        cached = min(cached, prompt)
        return cls(prompt, completion, cached, min(written, prompt - cached),
                   min(reasoning, completion))  # fmt: skip

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input, output_tokens=self.output,
            cache_read_tokens=self.cache_read or None, cache_write_tokens=self.cache_write or None,
            output_reasoning_tokens=self.reasoning or None,
        )  # fmt: skip


@dataclass(frozen=True)
class _Linear:
    """A price without tiers, per token of each kind (and per call)."""

    call: Decimal
    input: Decimal
    cache_read: Decimal
    cache_write: Decimal
    output: Decimal
    reasoning: Decimal

    def total(self, c: _Counts) -> Decimal:
        return (
            self.call
            + (c.input - c.cache_read - c.cache_write) * self.input
            + c.cache_read * self.cache_read
            + c.cache_write * self.cache_write
            + (c.output - c.reasoning) * self.output
            + c.reasoning * self.reasoning
        )

    @classmethod
    def of(cls, price: ModelPrice) -> _Linear | None:
        """The price's per-token prices, as the library answers them; None when it has tiers
        or when the library's answer for a large usage is not the linear one."""
        if any(isinstance(value, TieredPrices) for value in vars(price).values()):
            return None

        def library(c: _Counts) -> Decimal:
            return price.calc_price(c.usage())["total_price"]

        try:
            call = library(_Counts(0, 0))
            linear = cls(
                call=call,
                input=library(_Counts(1, 0)) - call,
                cache_read=library(_Counts(1, 0, cache_read=1)) - call,
                cache_write=library(_Counts(1, 0, cache_write=1)) - call,
                output=library(_Counts(0, 1)) - call,
                reasoning=library(_Counts(0, 1, reasoning=1)) - call,
            )
            probes = (_Counts(1_234_567, 98_765, 234_567, 34_567, 5_678), _Counts(3, 7, 1, 1, 2))
            if any(linear.total(probe) != library(probe) for probe in probes):
                return None
        except Exception:  # a kind of token the price refuses: the library decides each time
            return None
        return linear


_linear_lock = threading.Lock()
# id(ModelPrice) -> (that ModelPrice, kept so the id stays its own; its _Linear or None)
_linear_prices: dict[int, tuple[ModelPrice, _Linear | None]] = {}


def _linear_for(model: str, price_provider: str) -> _Linear | None:
    """The linear form of the model's price in force now, or None (use the library).
    Raises LookupError for a model the library does not know."""
    provider, info = get_snapshot().find_provider_model(model, None, price_provider, None)
    if provider.id == "groq" and info.id.startswith("whisper"):  # the library adjusts its usage
        return None
    price = info.get_prices(datetime.now(tz=UTC))
    known = _linear_prices.get(id(price))
    if known is None or known[0] is not price:
        with _linear_lock:
            known = _linear_prices[id(price)] = (price, _Linear.of(price))
    return known[1]


def usage_cost(
    usage: TokenUsage, *, price_provider: str | None, model_requested: str, model_answered: str
) -> float | None:
    """A call's cost in USD from its usage, priced as the model that answered, else as the one
    asked for; None when no price is known."""
    if usage.total_tokens == 0 and usage.prompt_tokens == 0 and usage.completion_tokens == 0:
        return 0.0
    price = functools.partial(
        call_cost,
        price_provider=price_provider,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    cost = price(model=model_answered or model_requested)
    if cost is None and model_answered and model_answered != model_requested:
        # A dated snapshot name the library lacks: the requested alias may be known.
        cost = price(model=model_requested)
    return cost
