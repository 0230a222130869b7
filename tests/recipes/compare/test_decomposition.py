"""Per-step cost x step reduction: each strategy's completions to reach a level against the baseline, split into
completions per optimizer step and steps, on hand-made runs with known numbers; censored seeds as bounds; report.md,
results.csv and the console."""

import csv
import math

import pytest

from dataflex_callbacks.recipes.compare import Budget, CompareSettings
from dataflex_callbacks.recipes.compare.decomposition import decompose, decomposition_section
from dataflex_callbacks.recipes.compare.grid import GridOutcome
from dataflex_callbacks.recipes.compare.settings import GridRun
from dataflex_callbacks.recipes.options import RunOptions

SHARED = 3e-3  # the toy suite's learning rate, the grid's own


def record(strategy, seed, points, rate=None):
    """A result record whose curve is `points` [(completions after each step, headline)], the first at step 0; `rate`:
    a run of the learning-rate sweep at that rate."""
    curve = [
        {
            "step": step,
            "completions": c,
            "completion_tokens": 4 * c,
            "wall_seconds": c / 100,
            "accuracy": {"overall": a, "a": a},
            "sampled_pass_at_1": {"overall": a, "a": a},
            "headline": a,
        }
        for step, (c, a) in enumerate(points)
    ]
    first, last = curve[0], curve[-1]
    return {
        "strategy": strategy,
        "seed": seed,
        "name": GridRun(strategy, seed, rate).name,
        "learning_rate": SHARED if rate is None else rate,
        "budget": "completions:640",
        "steps": len(points) - 1,
        "completions": last["completions"],
        "completion_tokens": last["completion_tokens"],
        "wall_seconds": last["wall_seconds"] + 1.0,
        "kept_frac": 1.0,
        "before": first["accuracy"],
        "after": last["accuracy"],
        "sampled_pass_at_1": {"k": 4, "temperature": 1.0, "before": first["accuracy"], "after": last["accuracy"]},
        "headline": {
            "metric": "sampled_pass_at_1",
            "k": 4,
            "temperature": 1.0,
            "levels": None,
            "rows": 100,
            "before": first["headline"],
            "after": last["headline"],
        },
        "curve": curve,
        "proportions": [{"step": 1, "sampled": {"a": 1.0}, "target": None}],
        "run_dir": "runs/x",
        "domains": ["a"],
        "shared_key": "k",
    }


def runs():
    """`base` generates 128 completions a step and reaches its final headline at its end: 0.7 after 4 steps (512
    completions) on seed 0, 0.8 after 5 (640) on seed 1. `lean` generates 64 a step on seed 0 and reaches 0.7 after 3
    steps (192), then 128 a step; 32 a step on seed 1, reaching 0.8 after 4 (128), then 128. `late` is `lean` on seed
    0 and never reaches 0.8 on seed 1: it ends at 0.75 after 4 steps of 64 (256 completions)."""
    return [
        record("base", 0, [(0, 0.3), (128, 0.4), (256, 0.5), (384, 0.6), (512, 0.7)]),
        record("base", 1, [(0, 0.3), (128, 0.4), (256, 0.5), (384, 0.6), (512, 0.7), (640, 0.8)]),
        record("lean", 0, [(0, 0.3), (64, 0.5), (128, 0.6), (192, 0.7), (320, 0.72), (448, 0.75)]),
        record("lean", 1, [(0, 0.3), (32, 0.5), (64, 0.6), (96, 0.7), (128, 0.8), (256, 0.85)]),
        record("late", 0, [(0, 0.3), (64, 0.5), (128, 0.6), (192, 0.7), (320, 0.72), (448, 0.75)]),
        record("late", 1, [(0, 0.3), (64, 0.5), (128, 0.6), (192, 0.7), (256, 0.75)]),
    ]


FINAL = {0: 0.7, 1: 0.8}  # the baseline's final headline per seed, the report's main level


def settings_for(tmp_path, strategies=("base", "lean", "late")):
    return CompareSettings(
        strategies=list(strategies),
        seeds=[0, 1],
        budget=Budget.parse("completions:640"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
    )


def test_per_step_cost_and_step_reduction_of_a_known_pair_are_measured_up_to_the_level():
    found = decompose(runs(), "lean", "base", FINAL)
    # Seed 0: 64 per step up to the level (not the run's 448 / 5 = 89.6) over 128; 3 steps over 4.
    # Seed 1: 32 per step (not 256 / 5 = 51.2) over 128; 4 steps over 5.
    assert found.per_seed[0].step_cost == pytest.approx(0.5) and found.per_seed[0].steps == pytest.approx(0.75)
    assert found.per_seed[1].step_cost == pytest.approx(0.25) and found.per_seed[1].steps == pytest.approx(0.8)
    assert found.step_cost.mean == pytest.approx(math.sqrt(0.5 * 0.25))  # geometric means over seeds
    assert found.steps.ratio.mean == pytest.approx(math.sqrt(0.75 * 0.8))
    assert found.step_cost.n == 2 and found.steps.ratio_bound == ""


def test_per_step_cost_x_step_reduction_is_the_completions_ratio_per_seed_and_over_seeds():
    found = decompose(runs(), "lean", "base", FINAL)
    assert found.per_seed[0].completions == pytest.approx(192 / 512)
    assert found.per_seed[1].completions == pytest.approx(128 / 640)
    for factors in found.per_seed.values():
        assert factors.step_cost * factors.steps == pytest.approx(factors.completions)
    # The first section's completions ratio, computed on its own, is the product of the two geometric means.
    assert found.product() == pytest.approx(found.completions.ratio.mean)
    assert found.completions.ratio.mean == pytest.approx(math.sqrt(192 / 512 * 128 / 640))
    table = "\n".join(decomposition_section(runs(), ["base", "lean"], "base", None))
    assert "| `lean` | 0.35 [" in table and "0: 0.50 x 0.75 = 0.38, 1: 0.25 x 0.80 = 0.20 |" in table


def test_a_censored_seed_shows_its_steps_and_completions_as_bounds_never_a_saving():
    found = decompose(runs(), "late", "base", FINAL)
    seed1 = found.per_seed[1]
    # `late` never reaches 0.8 on seed 1: 4 steps of 64 are what it spent, more than 4 of the baseline's 5 steps.
    assert seed1.bound == "lower" and seed1.steps == pytest.approx(0.8) and seed1.completions == pytest.approx(0.4)
    assert seed1.step_cost == pytest.approx(0.5)  # over its whole run: measured, not a bound
    assert found.steps.ratio_bound == "lower" and found.completions.ratio_bound == "lower"
    table = "\n".join(decomposition_section(runs(), ["base", "late"], "base", None))
    row = next(line for line in table.splitlines() if line.startswith("| `late` |"))
    cells = [cell.strip() for cell in row.split("|")[2:-1]]
    assert cells[0].startswith("0.50 [")  # the per-step cost is no bound
    assert cells[1].startswith("> ") and "lower bound: the strategy not reached in seed 1" in cells[1]
    assert cells[2].startswith("> ")
    assert cells[3] == "0: 0.50 x 0.75 = 0.38, 1: 0.50 x > 0.80 = > 0.40"


def test_results_csv_has_each_runs_per_step_cost_and_step_reduction(tmp_path):
    from dataflex_callbacks.recipes.compare.results_csv import write_results_csv

    write_results_csv(str(tmp_path / "results.csv"), runs(), "base", 0.75)
    with open(tmp_path / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = {row["strategy"] + row["seed"]: row for row in reader}
    for level in ("baseline_final", "target"):
        for suffix in ("step_cost_x_baseline", "steps_x_baseline", "completions_x_baseline"):
            assert f"reach_{level}_{suffix}" in reader.fieldnames
    lean0, late1 = rows["lean0"], rows["late1"]
    assert float(lean0["reach_baseline_final_step_cost_x_baseline"]) == pytest.approx(0.5)
    assert float(lean0["reach_baseline_final_steps_x_baseline"]) == pytest.approx(0.75)
    assert float(lean0["reach_baseline_final_completions_x_baseline"]) == pytest.approx(0.375)
    # A censored run: at what it spent, its censored column says the figure is a bound.
    assert late1["reach_baseline_final_censored"] == "True"
    assert float(late1["reach_baseline_final_steps_x_baseline"]) == pytest.approx(0.8)
    assert float(rows["base1"]["reach_baseline_final_step_cost_x_baseline"]) == pytest.approx(1.0)


def test_report_md_has_the_table_after_the_reach_tables_and_the_console_one_line_per_strategy(tmp_path):
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.report import render_report

    records = runs()
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    report = render_report(settings_for(tmp_path), outcome)
    start = report.index("## Compute to reach the target")
    table = report.index("### Per-step cost x step reduction")
    assert start < table < report.index("## Held-out accuracy after training")
    header = (
        "| strategy | completions per step (x baseline) | steps to level (x baseline) | "
        "completions to level (x baseline) |"
    )
    assert header in report[table:]
    assert "| `lean` | 0.35 [" in report[table:] and "| `late` | 0.50 [" in report[table:]
    lines = summary_lines(settings_for(tmp_path), outcome)
    at = next(i for i, line in enumerate(lines) if line.startswith("completions per step x optimizer steps"))
    assert lines[at + 1] == "  lean             baseline_final: 0.35 x 0.77 = 0.27"
    assert lines[at + 2].startswith("  late             baseline_final: 0.50 x > ")
    assert not lines[at + 3].startswith("  ")  # one line per strategy, none for the baseline


def test_a_run_that_had_the_level_from_its_start_has_no_per_step_cost():
    records = runs() + [record("early", 0, [(0, 0.9), (64, 0.9)]), record("early", 1, [(0, 0.9), (64, 0.9)])]
    found = decompose(records, "early", "base", FINAL)
    assert found.step_cost is None and "from its start" in found.step_cost_note
    table = "\n".join(decomposition_section(records, ["base", "early"], "base", None))
    assert "| `early` | n/a (a run had the level from its start (no step to it) in seed 0, 1) |" in table


def test_against_the_tuned_baseline_a_strategy_is_decomposed_against_the_fastest_rate(tmp_path):
    from dataflex_callbacks.recipes.compare.decomposition import tuned_decomposition_section

    # Plain GRPO at 1e-2 reaches each seed's level in half the shared rate's steps, at the same 128 per step.
    faster = [
        record("base", 0, [(0, 0.3), (128, 0.6), (256, 0.7)], 1e-2),
        record("base", 1, [(0, 0.3), (128, 0.5), (256, 0.6), (384, 0.8)], 1e-2),
    ]
    settings = CompareSettings(
        strategies=["base", "lean"],
        seeds=[0, 1],
        budget=Budget.parse("completions:640"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
        base=RunOptions(suite="toy"),
        tune_learning_rates=[SHARED, 1e-2],
    )
    grid = [r for r in runs() if r["strategy"] != "late"]
    section = "\n".join(tuned_decomposition_section(settings, grid, faster))
    assert "x tuned: `base@lr0.01`" in section and "completions per step (x tuned)" in section
    # `lean`: 64 per step over 128 (seed 0), 32 over 128 (seed 1); 3 steps over 2, 4 over 3.
    assert "| `lean` | 0.35 [" in section and "0: 0.50 x 1.50 = 0.75, 1: 0.25 x 1.33 = 0.33 |" in section
    # Plain GRPO at the shared rate: the same cost per step, twice and 5/3 the steps.
    assert "| `base` | 1.00 [1.00, 1.00] |" in section and "0: 1.00 x 2.00 = 2.00, 1: 1.00 x 1.67 = 1.67 |" in section
    report = render_report_text(settings, grid, faster)
    tuned_part = report.split("## Against the tuned baseline")[1].split("\n## ")[0]
    assert "### Per-step cost x step reduction against the tuned baseline" in tuned_part


def render_report_text(settings, records, tuned):
    from dataflex_callbacks.recipes.compare.report import render_report

    return render_report(settings, GridOutcome(records=records, tuned=tuned, reused=[r["name"] for r in records]))
