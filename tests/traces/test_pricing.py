import pytest

from traces.pricing import call_cost


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
