"""`dataflex compare` with dynamic sampling: every generated completion counts against the budget, and the
report's signal-group columns match the runs' per-step metrics."""

import csv
import json
import math

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.compare.budget import Budget, GenerationLedger  # noqa: E402

BUDGET = 100
PER_STEP = 4 * 4  # prompts per step x generations: what one generation batch holds


@pytest.fixture(scope="module")
def compare_dir(small_compare):
    return small_compare("compare-dynamic", "baseline,dapo", f"completions:{BUDGET}", "--eval-points", "0")


def _metrics(folder, name):
    path = folder / "runs" / name / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _results(folder):
    with open(folder / "results.csv", newline="") as handle:
        return {row["strategy"]: row for row in csv.DictReader(handle)}


def _hand_counts(metrics, dynamic):
    """(completions, trained signal groups, completions in zero-signal groups), from the per-step logs alone.

    TRL logs `frac_reward_zero_std` for every generation round (all rounds hold B groups), so its step mean
    times the step's completions is the step's completions in zero-signal groups.
    """
    generated = [m["dataflex/dynamic/generated"] if dynamic else PER_STEP for m in metrics]
    zero = [m["frac_reward_zero_std"] * g for m, g in zip(metrics, generated, strict=True)]
    if dynamic:
        groups = [m["dataflex/dynamic/signal_groups"] for m in metrics]
    else:
        groups = [g / 4 - z / 4 for g, z in zip(generated, zero, strict=True)]
    return sum(generated), sum(groups), sum(zero)


def test_a_dapo_run_counts_every_round_and_stops_at_the_step_that_spends_the_budget(compare_dir):
    metrics = _metrics(compare_dir, "dapo-seed0")
    generated = [m["dataflex/dynamic/generated"] for m in metrics]
    assert all(g >= PER_STEP for g in generated) and any(g > PER_STEP for g in generated)  # further rounds ran
    cumulative = [sum(generated[: k + 1]) for k in range(len(generated))]
    stop = next(k for k, total in enumerate(cumulative, 1) if total >= BUDGET)
    assert [m["step"] for m in metrics] == list(range(1, stop + 1))
    assert [m["completions"] for m in metrics] == cumulative
    result = json.loads((compare_dir / "runs" / "dapo-seed0" / "result.json").read_text())
    assert result["steps"] == stop and result["completions"] == cumulative[-1]
    assert result["curve"][-1]["completions"] == cumulative[-1]
    rows = _results(compare_dir)
    assert int(rows["dapo"]["completions"]) == cumulative[-1] and int(rows["dapo"]["steps"]) == stop
    # The baseline generates one batch per step, so it needs more steps for the same budget.
    baseline_steps = math.ceil(BUDGET / PER_STEP)
    assert int(rows["baseline"]["steps"]) == baseline_steps > stop
    assert int(rows["baseline"]["completions"]) == baseline_steps * PER_STEP


@pytest.mark.parametrize("strategy", ["baseline", "dapo"])
def test_signal_group_columns_match_the_per_step_metrics(compare_dir, strategy):
    metrics = _metrics(compare_dir, f"{strategy}-seed0")
    completions, groups, zero = _hand_counts(metrics, dynamic=strategy == "dapo")
    row = _results(compare_dir)[strategy]
    assert int(row["completions"]) == completions
    assert int(row["signal_groups"]) == pytest.approx(groups)
    assert int(row["zero_signal_completions"]) == pytest.approx(zero)
    assert float(row["completions_per_signal_group"]) == pytest.approx(completions / groups)
    report = (compare_dir / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| strategy | seeds |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    line = next(line for line in report.splitlines() if line.startswith(f"| `{strategy}` | 1 |"))
    values = dict(zip(cells, (c.strip() for c in line.strip("|").split("|")), strict=True))
    assert values["completions per trained signal group"] == f"{completions / groups:.2f}"
    assert values["completions in zero-signal groups"] == f"{zero:.0f}"
    assert values["completions"] == f"{completions:.0f}"


def test_a_logged_count_replaces_the_schedules_count_of_its_step():
    ledger = GenerationLedger(Budget("completions", 100))
    assert ledger.record_step(1, 16, 1, 1) is False
    assert ledger.record_generated(1, 64) is False
    assert ledger.completions == 64 and ledger.generated_at == {1: 64}
    ledger.record_step(2, 16, 1, 1)
    assert ledger.record_generated(2, 48) is True
    assert ledger.completions == 112
    ledger.record_lengths(2, 2.0)
    assert ledger.completion_tokens == pytest.approx(96.0)
