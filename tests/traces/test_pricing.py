import pytest

from traces.calls.pricing import call_cost


def test_cached_prompt_tokens_are_billed_at_the_cache_read_price():
    cost = call_cost(
        model="gpt-4o", price_provider="openai", prompt_tokens=10_000, completion_tokens=0,
        cached_tokens=8_000,
    )  # fmt: skip
    # gpt-4o: $2.50 per million input tokens, $1.25 per million cached input tokens.
    assert cost == pytest.approx((2_000 * 2.50 + 8_000 * 1.25) / 1e6, rel=1e-9)


def test_reasoning_tokens_are_billed_once_as_part_of_the_completion():
    with_reasoning = call_cost(
        model="o3-mini", price_provider="openai", prompt_tokens=0, completion_tokens=5_000,
        reasoning_tokens=4_000,
    )  # fmt: skip
    assert with_reasoning == pytest.approx(5_000 * 4.40 / 1e6, rel=1e-9)


def test_a_model_the_library_does_not_know_has_no_price():
    assert (
        call_cost(model="my-lora-7b", price_provider="openai", prompt_tokens=5, completion_tokens=5)
        is None
    )


def test_a_provider_without_prices_has_no_price():
    assert (
        call_cost(model="gpt-4o", price_provider=None, prompt_tokens=5, completion_tokens=5) is None
    )


def test_an_operator_price_wins_and_may_be_zero(settings):
    settings.EVALHUB_MODEL_PRICES = {
        "gpt-4o": {"input_per_mtok": 1, "output_per_mtok": 3},
        "mine": {"input_per_mtok": 0, "output_per_mtok": 0},
    }
    assert call_cost(
        model="gpt-4o", price_provider="openai", prompt_tokens=1_000, completion_tokens=1_000,
        cached_tokens=500,
    ) == pytest.approx(4_000 / 1e6)  # fmt: skip
    assert call_cost(model="mine", price_provider=None, prompt_tokens=9, completion_tokens=9) == 0.0


def _library_cost(model, provider, **counts):
    """What genai-prices answers for the call, as call_cost has always asked it."""
    from genai_prices import Usage, calc_price

    prompt, completion = counts["prompt_tokens"], counts["completion_tokens"]
    cached = min(counts["cached_tokens"], prompt)
    usage = Usage(
        input_tokens=prompt, output_tokens=completion, cache_read_tokens=cached or None,
        cache_write_tokens=min(counts["cache_write_tokens"], prompt - cached) or None,
        output_reasoning_tokens=min(counts["reasoning_tokens"], completion) or None,
    )  # fmt: skip
    try:
        return float(calc_price(usage, model, provider_id=provider).total_price)
    except Exception:
        return None


def test_every_model_costs_exactly_what_the_library_says():
    """The per-token prices read once for an untiered model give the library's own answer, to
    the last digit, for every model of every provider; tiered ones go through the library."""
    import random

    from genai_prices.data_snapshot import get_snapshot

    from traces.calls import pricing

    rng = random.Random(7)
    usages = [
        {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 512,
         "reasoning_tokens": 0, "cache_write_tokens": 0},
        {"prompt_tokens": 300_000, "completion_tokens": 40_000, "cached_tokens": 250_000,
         "reasoning_tokens": 30_000, "cache_write_tokens": 20_000},  # past the usual tiers
        {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0,
         "reasoning_tokens": 0, "cache_write_tokens": 0},
    ] + [
        {"prompt_tokens": rng.randrange(0, 400_000), "completion_tokens": rng.randrange(0, 60_000),
         "cached_tokens": rng.randrange(0, 200_000), "reasoning_tokens": rng.randrange(0, 9_000),
         "cache_write_tokens": rng.randrange(0, 50_000)}
        for _ in range(4)
    ]  # fmt: skip
    linear = tiered = 0
    for provider in get_snapshot().providers:
        for info in provider.models:
            for counts in usages:
                expected = _library_cost(info.id, provider.id, **counts)
                got = call_cost(model=info.id, price_provider=provider.id, **counts)
                assert got == expected, (provider.id, info.id, counts)
            try:
                fast = pricing._linear_for(info.id, provider.id)
            except LookupError:
                continue
            linear += fast is not None
            tiered += fast is None
    assert linear > 500 and tiered > 10, (linear, tiered)
    assert pricing._linear_for("gpt-4o-mini", "openai") is not None
