"""Budgets: parsing, step caps and counting generated completions like TRL's generation schedule."""

import pytest

from dataflex_callbacks.recipes.compare.budget import Budget, GenerationLedger


def test_parse_and_print_round_trip():
    assert Budget.parse("steps:300") == Budget("steps", 300)
    assert Budget.parse(" completions:20000 ") == Budget("completions", 20000)
    assert str(Budget.parse("steps:5")) == "steps:5"


@pytest.mark.parametrize("text", ["300", "steps:", "steps:-1", "steps:0", "tokens:5", "steps:1.5"])
def test_bad_budgets_name_the_valid_forms(text):
    with pytest.raises(ValueError, match="steps:"):
        Budget.parse(text)


def test_step_cap():
    assert Budget("steps", 7).step_cap(64) == 7
    assert Budget("completions", 150).step_cap(64) == 3
    assert Budget("completions", 150).step_cap(64, fewer_per_step=True) == 12


@pytest.mark.parametrize(
    "spec, fewer",
    [("baseline", False), ("screen", False), ("screen_greso", True), ("skip_fewer", True), ("screen_fewer", True)]
    + [("adaptive", True), ("knapsack", True)],
)
def test_strategies_that_may_generate_fewer_per_step_get_the_step_headroom(spec, fewer):
    from dataflex_callbacks import build_strategy
    from dataflex_callbacks.recipes.compare.grid import _generates_fewer

    assert _generates_fewer(build_strategy(spec)) is fewer


def test_ledger_counts_one_generation_per_step_and_stops_at_the_completions_budget():
    ledger = GenerationLedger(Budget("completions", 150))
    spent = [ledger.record_step(step, 64, 1, 1) for step in (1, 2, 3)]
    assert spent == [False, False, True]
    assert ledger.completions == 192
    ledger.record_lengths(3, 3.5)
    assert ledger.completion_tokens == pytest.approx(224.0)


def test_ledger_follows_generations_reused_over_several_steps():
    # TRL with steps_per_generation * num_iterations = 2 micro-steps per generation, 1 micro-step per step.
    ledger = GenerationLedger(Budget("steps", 4))
    spent = [ledger.record_step(step, 128, 1, 2) for step in (1, 2, 3, 4)]
    assert spent == [False, False, False, True]
    assert ledger.generated_at == {1: 128, 3: 128}
    ledger.record_lengths(2, 4.0)  # no generation at step 2: no tokens
    assert ledger.completion_tokens == 0.0
