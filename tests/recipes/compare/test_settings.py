"""compare.settings: the default evaluation points place every crossing to within 2% of the budget."""

import pytest

from dataflex_callbacks.recipes.compare import Budget, CompareSettings


@pytest.mark.parametrize("budget", ["completions:51200", "completions:6400", "steps:100", "steps:400"])
def test_the_default_eval_points_space_evaluations_at_2_percent_of_the_budget_or_less(tmp_path, budget):
    settings = CompareSettings(
        strategies=["baseline"], seeds=[0], budget=Budget.parse(budget), output_dir=str(tmp_path), progress=False
    )
    amount = settings.budget.amount
    marks = [0, *settings.eval_plan().thresholds(), amount]  # before and after training bracket the plan
    widest = max(b - a for a, b in zip(marks, marks[1:], strict=False))
    assert widest <= 0.02 * amount
