"""compare.report: completions to reach the baseline's final accuracy, against hand-computed curves."""

import math

import pytest

from dataflex_callbacks.recipes.compare.reach import cost_to_reach as completions_to_reach, reach_table


def test_reach_is_the_last_crossing_from_below_interpolated():
    # Dips below 0.5, climbs through it between 20 and 30 (at 25), stays above.
    assert completions_to_reach([0, 10, 20, 30], [0.5, 0.3, 0.4, 0.6], 0.5) == pytest.approx(25.0)
    assert completions_to_reach([0, 10], [0.7, 0.6], 0.6) == 0.0  # never below
    assert math.isnan(completions_to_reach([0, 10, 20], [0.7, 0.8, 0.5], 0.6))  # ends below


def run(strategy, seed, curve):
    return {
        "strategy": strategy,
        "seed": seed,
        "curve": [{"completions": c, "accuracy": {"overall": a}} for c, a in curve],
    }


def test_reach_table_compares_each_strategy_with_the_baseline_final_mean():
    records = [
        run("base", 0, [(0, 0.5), (100, 0.2), (200, 0.6)]),
        run("base", 1, [(0, 0.5), (100, 0.4), (200, 0.8)]),
        run("fast", 0, [(0, 0.5), (100, 0.7), (200, 0.9)]),
        run("fast", 1, [(0, 0.5), (100, 0.7), (200, 0.9)]),
        run("slow", 0, [(0, 0.5), (100, 0.1), (200, 0.2)]),
        run("slow", 1, [(0, 0.5), (100, 0.1), (200, 0.2)]),
    ]
    level, rows = reach_table(records, ["base", "fast", "slow"], "base")
    assert level == pytest.approx(0.7)
    # baseline mean curve 0.5, 0.3, 0.7: level 0.7 reached at 200; `fast` 0.5, 0.7: at 100 (ratio 0.5).
    assert rows[2] == "| `base` | 200 | 1.00 |"
    assert rows[3] == "| `fast` | 100 | 0.50 |"
    assert rows[4] == "| `slow` | never | - |"


def test_reach_table_is_empty_without_baseline_runs():
    level, rows = reach_table([run("other", 0, [(0, 0.5), (10, 0.6)])], ["base", "other"], "base")
    assert math.isnan(level) and rows == []
