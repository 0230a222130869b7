"""A strategy's own recipe (`--strategy-recipe`): its checks, the runs it changes, and a real tiny comparison in
which one strategy draws twice the prompts a step and is paired with the baseline by seed."""

import csv
import json

import pytest

from dataflex_callbacks.errors import DataFlexError
from dataflex_callbacks.recipes.compare import Budget, CompareInputError, CompareSettings
from dataflex_callbacks.recipes.compare.strategy_recipes import parse_strategy_recipes
from dataflex_callbacks.recipes.options import RunOptions


def settings_for(tmp_path, recipes, budget="completions:64", strategies=("baseline", "difffilter"), **extra):
    return CompareSettings(
        strategies=list(strategies),
        seeds=[0, 1],
        budget=Budget.parse(budget),
        output_dir=str(tmp_path / "cmp"),
        eval_points=0,
        progress=False,
        base=RunOptions(suite="toy", prompts_per_step=4, num_generations=4),
        strategy_recipes=recipes,
        **extra,
    )


def test_a_strategys_own_recipe_sets_its_runs_options_and_step_cap_and_no_other_runs(tmp_path):
    settings = settings_for(tmp_path, ["difffilter:prompts_per_step=8,learning_rate=1e-2"])
    runs = {run.name: run for run in settings.grid()}
    own, shared = runs["difffilter-seed1"], runs["baseline-seed1"]
    assert own.recipe == (("prompts_per_step", 8), ("learning_rate", 1e-2)) and shared.recipe == ()
    options = settings.options_for(own)
    assert (options.prompts_per_step, options.num_generations, options.learning_rate) == (8, 4, 1e-2)
    assert options.steps == 2  # 64 completions at 8 x 4 a step; the baseline's 4 x 4 gets 4 steps
    assert settings.options_for(shared).steps == 4 and settings.options_for(shared).prompts_per_step == 4
    assert settings.learning_rate_of(own) == 1e-2 and settings.learning_rate_of(shared) == settings.base.learning_rate


def test_a_value_equal_to_the_shared_one_is_no_recipe_and_a_mapping_from_python_is_read_as_the_flag(tmp_path):
    assert settings_for(tmp_path, ["difffilter:prompts_per_step=4"]).strategy_recipes == {}
    from_python = settings_for(tmp_path, {"difffilter": {"num_generations": 8}})
    assert from_python.strategy_recipes == {"difffilter": (("num_generations", 8),)}


@pytest.mark.parametrize(
    ("recipes", "budget", "message"),
    [
        (["difffilter"], "completions:64", "takes LABEL:key=value"),
        (["difffilter:prompts_per_step"], "completions:64", "takes LABEL:key=value"),
        (["difffilter:prompts_per_step=8", "difffilter:learning_rate=1e-2"], "completions:64", "two recipes"),
        (["knapsack:prompts_per_step=8"], "completions:64", "'knapsack', which is not among the strategies"),
        (["baseline:prompts_per_step=8"], "completions:64", "the baseline trains at the shared recipe"),
        (["difffilter:beta=0.1"], "completions:64", "beta cannot differ between strategies"),
        (["difffilter:prompts_per_step=0"], "completions:64", "--strategy-recipe prompts_per_step must be"),
        (["difffilter:learning_rate=fast"], "completions:64", "--strategy-recipe learning_rate must be"),
        (["difffilter:prompts_per_step=8"], "steps:4", "pass a completions budget"),
    ],
)
def test_an_unusable_recipe_is_refused_naming_the_fix(tmp_path, recipes, budget, message):
    with pytest.raises(CompareInputError, match=message) as raised:
        settings_for(tmp_path, recipes, budget=budget)
    assert isinstance(raised.value, DataFlexError)


def test_a_mapping_whose_value_is_not_a_mapping_is_refused(tmp_path):
    with pytest.raises(CompareInputError, match="maps a strategy to its run options"):
        settings_for(tmp_path, {"difffilter": 32})


def test_a_learning_rate_of_its_own_is_allowed_under_a_steps_budget(tmp_path):
    settings = settings_for(tmp_path, ["difffilter:learning_rate=1e-2"], budget="steps:4")
    assert settings.options_for(settings.grid()[-1]).steps == 4


def test_a_training_function_refuses_the_flag(tmp_path):
    with pytest.raises(CompareInputError, match="--strategy-recipe"):
        CompareSettings(
            strategies=["baseline", "difffilter"],
            seeds=[0],
            budget=Budget.parse("steps:4"),
            output_dir=str(tmp_path / "cmp"),
            progress=False,
            train="tests.recipes.compare.test_user_loop:train",
            strategy_recipes=["difffilter:learning_rate=1e-2"],
        )


def test_parsing_reads_dashes_as_the_fields_underscores():
    assert parse_strategy_recipes(["k:prompts-per-step=32"], CompareInputError) == {"k": {"prompts_per_step": "32"}}


TINY = ["--seeds", "0", "--no-progress", "--jobs", "1", "--prompts-per-step", "4", "--num-generations", "4"]


def test_a_real_comparison_trains_a_strategy_at_its_own_recipe_and_retrains_only_it_when_the_recipe_changes(
    tmp_path, capsys, monkeypatch
):
    from dataflex_callbacks.recipes.cli import main
    from dataflex_callbacks.recipes.compare import grid as grid_module

    folder = tmp_path / "cmp"
    args = ["compare", "--strategies", "baseline,difffilter", "--budget", "completions:64", "--eval-points", "0", *TINY]
    args += ["--suite", "toy", "--n-test", "8", "--output-dir", str(folder)]
    assert main([*args, "--strategy-recipe", "difffilter:prompts_per_step=8"]) == 0
    records = {p.name: json.loads((p / "result.json").read_text()) for p in (folder / "runs").iterdir()}
    own, shared = records["difffilter-seed0"], records["baseline-seed0"]
    assert (own["steps"], own["completions"], own["recipe"]) == (2, 64, {"prompts_per_step": 8})
    assert (shared["steps"], shared["completions"], shared["recipe"]) == (4, 64, {})
    with open(folder / "results.csv", newline="") as handle:
        rows = {row["strategy"]: row for row in csv.DictReader(handle)}
    assert rows["difffilter"]["recipe"] == "prompts_per_step=8" and rows["baseline"]["recipe"] == ""
    report = (folder / "report.md").read_text()
    assert "`difffilter` trains at its own recipe: prompts_per_step=8" in report
    capsys.readouterr()
    computed = []
    real = grid_module.execute_run
    monkeypatch.setattr(
        grid_module, "execute_run", lambda s, run, *a, **k: computed.append(run.name) or real(s, run, *a, **k)
    )
    assert main([*args, "--strategy-recipe", "difffilter:prompts_per_step=8"]) == 0
    assert computed == []
    assert main([*args, "--strategy-recipe", "difffilter:prompts_per_step=2"]) == 0
    assert computed == ["difffilter-seed0"]
    assert "was trained with the recipe 'prompts_per_step=8', not 'prompts_per_step=2'" in capsys.readouterr().err
    assert main([*args, "--strategy-recipe", "difffilter:prompts_per_step=2,learning_rate=1e-2"]) == 0
    assert computed == ["difffilter-seed0", "difffilter-seed0"]  # a rate of its own is a changed recipe, said so
    assert "not 'prompts_per_step=2, learning_rate=0.01'" in capsys.readouterr().err
    record = json.loads((folder / "runs" / "difffilter-seed0" / "result.json").read_text())
    assert (record["steps"], record["learning_rate"]) == (8, 1e-2)
    assert record["recipe"] == {"prompts_per_step": 2, "learning_rate": 1e-2}
