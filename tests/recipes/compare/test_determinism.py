"""Same strategy, same seed, same budget: identical results on CPU."""

import json

from dataflex_callbacks.recipes.compare.budget import Budget
from dataflex_callbacks.recipes.compare.grid import CompareSettings, GridRun, execute_run
from dataflex_callbacks.recipes.runner import RunOptions

VARYING = ("wall_seconds", "generation_seconds", "update_seconds", "run_dir", "step_time")


def _run(folder):
    settings = CompareSettings(
        strategies=["ar"],
        seeds=[1],
        budget=Budget("completions", 150),
        output_dir=str(folder),
        base=RunOptions(n_train=40, n_test=20, prompts_per_step=8),
        eval_points=1,
        progress=False,
    )
    record = execute_run(settings, GridRun("ar", 1))
    with open(f"{record['run_dir']}/metrics.jsonl") as handle:
        metrics = [{k: v for k, v in json.loads(line).items() if k not in VARYING} for line in handle]
    record = {k: v for k, v in record.items() if k not in VARYING}
    record["curve"] = [{k: v for k, v in point.items() if k not in VARYING} for point in record["curve"]]
    return record, metrics


def test_same_seed_and_strategy_give_identical_results(tmp_path):
    first, first_metrics = _run(tmp_path / "a")
    second, second_metrics = _run(tmp_path / "b")
    # 150 completions at 64 per step: the budget stops the run after its third step.
    assert first["steps"] == 3 and first["completions"] == 192
    assert first == second
    assert first_metrics == second_metrics
