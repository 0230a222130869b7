"""Better than tuning? `--tune-learning-rates`: the sweep's runs, the fastest rate (censoring), every strategy's
paired ratio to it, its place in report.md, results.csv, the console and the verdict; a real tiny comparison."""

import csv
import math

import pytest

from dataflex_callbacks.recipes.compare import Budget, CompareInputError, CompareSettings, stats
from dataflex_callbacks.recipes.compare.grid import GridOutcome
from dataflex_callbacks.recipes.compare.settings import GridRun
from dataflex_callbacks.recipes.compare.tuning import tuned_levels, tuning_columns, tuning_verdict
from dataflex_callbacks.recipes.options import RunOptions

SHARED = 3e-3  # the toy suite's learning rate, the grid's own


def record(strategy, seed, points, rate=SHARED):
    """A result record (results.py's shape) whose headline curve is `points` [(completions, headline)]."""
    curve = [
        {
            "step": i,
            "completions": c,
            "accuracy": {"overall": a, "a": a},
            "headline": a,
        }
        for i, (c, a) in enumerate(points)
    ]
    name = GridRun(strategy, seed, None if rate == SHARED else rate).name
    return {
        "strategy": strategy,
        "seed": seed,
        "name": name,
        "learning_rate": rate,
        "budget": "completions:400",
        "steps": len(points) - 1,
        "completions": curve[-1]["completions"],
        "completion_tokens": 0,
        "wall_seconds": 1.0,
        "kept_frac": 1.0,
        "before": curve[0]["accuracy"],
        "after": curve[-1]["accuracy"],
        "headline": {"metric": "accuracy", "levels": None, "rows": 100, "before": points[0][1], "after": points[-1][1]},
        "curve": curve,
        "proportions": [],
        "run_dir": f"runs/{name}",
        "domains": ["a"],
        "shared_key": "k",
    }


def settings_for(tmp_path, rates=(1e-3, SHARED, 1e-2, 3e-2), strategies=("baseline", "fast")):
    return CompareSettings(
        strategies=list(strategies),
        seeds=[0, 1],
        budget=Budget.parse("completions:400"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
        base=RunOptions(suite="toy"),
        tune_learning_rates=rates if isinstance(rates, str) else list(rates),
    )


def sweep():
    """The grid (baseline ends at 0.8 on both seeds, reaching it at 400) and the sweep's runs: 1e-2 reaches 0.8 at
    100 on both seeds; 3e-2 at 10 on seed 0 but never on seed 1 (censored there, at 400 spent: a geometric mean of
    63, below 1e-2's 100); 1e-3 never."""
    grid = [
        record("baseline", 0, [(0, 0.5), (200, 0.6), (400, 0.8)]),
        record("baseline", 1, [(0, 0.5), (200, 0.6), (400, 0.8)]),
        record("fast", 0, [(0, 0.5), (50, 0.8), (400, 0.9)]),
        record("fast", 1, [(0, 0.5), (40, 0.8), (400, 0.9)]),
    ]
    tuned = [
        record("baseline", 0, [(0, 0.5), (400, 0.7)], 1e-3),
        record("baseline", 1, [(0, 0.5), (400, 0.7)], 1e-3),
        record("baseline", 0, [(0, 0.5), (100, 0.8), (400, 0.9)], 1e-2),
        record("baseline", 1, [(0, 0.5), (100, 0.8), (400, 0.9)], 1e-2),
        record("baseline", 0, [(0, 0.5), (10, 0.8), (400, 0.9)], 3e-2),
        record("baseline", 1, [(0, 0.5), (400, 0.7)], 3e-2),
    ]
    return grid, tuned


def test_the_fastest_rate_is_the_one_that_reaches_the_level_in_fewest_completions_never_a_censored_one(tmp_path):
    grid, tuned = sweep()
    level = tuned_levels(settings_for(tmp_path), grid, tuned)[0]
    assert [r.rate for r in level.rates] == [1e-3, SHARED, 1e-2, 3e-2]
    ranks = {r.rate: r.rank for r in level.rates}
    # 3e-2's geometric mean (sqrt(10 * 400) = 63) is the smallest, but it never reached the level on seed 1.
    assert ranks[3e-2][1] < ranks[1e-2][1] and ranks[3e-2][0] == 1
    assert level.fastest.rate == 1e-2 and level.fastest.label == "baseline@lr0.01"


def test_every_rate_censored_ranks_by_censored_seeds_then_geometric_mean(tmp_path):
    grid, tuned = sweep()
    tuned = [r for r in tuned if r["learning_rate"] != 1e-2]  # every other rate is censored on some seed
    grid = [r for r in grid if r["strategy"] == "fast"] + [
        record("baseline", 0, [(0, 0.5), (400, 0.8)]),
        record("baseline", 1, [(0, 0.5), (400, 0.8)]),
    ]
    level = tuned_levels(settings_for(tmp_path, rates=(1e-3, SHARED, 3e-2)), grid, tuned)[0]
    # The shared rate reaches its own final headline on every seed (at 400): the only uncensored rate.
    assert level.fastest.label == "baseline"


def test_each_strategy_is_paired_by_seed_with_the_fastest_rate_and_with_the_baseline_at_its_own_rate(tmp_path):
    grid, tuned = sweep()
    level = tuned_levels(settings_for(tmp_path), grid, tuned)[0]
    fast_costs = [50 * 0.3 / 0.3, 40.0]  # seed 0: 0.5 -> 0.8 over 50; seed 1 over 40
    against_tuned = level.against_fastest["fast"].ratio
    assert against_tuned.mean == pytest.approx(math.sqrt(0.5 * 0.4))
    assert against_tuned == stats.paired_ratio_interval(fast_costs, [100.0, 100.0])
    assert level.against_own["fast"].ratio.mean == pytest.approx(math.sqrt(50 / 400 * 40 / 400))
    # The baseline at its shared rate against the tuned one: 4x its completions on both seeds.
    assert level.against_fastest["baseline"].ratio.mean == pytest.approx(4.0)


def test_results_csv_cells_give_each_runs_ratio_to_the_fastest_rate_on_its_seed(tmp_path):
    grid, tuned = sweep()
    rows, cells = tuning_columns(settings_for(tmp_path), grid, tuned)
    assert {r["strategy"] for r in rows} == {
        "baseline",
        "fast",
        "baseline@lr0.001",
        "baseline@lr0.01",
        "baseline@lr0.03",
    }
    assert cells["fast-seed1"]["tuned_baseline_final_x_fastest"] == pytest.approx(0.4)
    assert cells["fast-seed1"]["tuned_baseline_final_x_baseline"] == pytest.approx(0.1)
    assert cells["fast-seed1"]["tuned_baseline_final_fastest_lr"] == 1e-2
    assert cells["baseline@lr0.03-seed1"]["learning_rate"] == 3e-2


def test_the_verdict_says_whether_a_strategy_beats_the_tuned_baseline(tmp_path):
    grid, tuned = sweep()
    settings = settings_for(tmp_path)
    # Half the fastest rate's completions on both seeds: an interval of 0.5x on each side, wholly below 1x.
    steady = [r for r in grid if r["strategy"] != "fast"] + [
        record("fast", seed, [(0, 0.5), (50, 0.8), (400, 0.9)]) for seed in (0, 1)
    ]
    (line,) = tuning_verdict(settings, steady, tuned)
    assert line.startswith("- Better than tuning to reach") and "`fast` 0.50x [0.50, 0.50]" in line
    # `fast` as measured (0.5x and 0.4x): 2 seeds' interval is too wide to claim it.
    assert "No strategy is shown to beat the tuned baseline" in tuning_verdict(settings, grid, tuned)[0]
    # `fast` slowed to 200 completions on both seeds: 2x the fastest rate's 100, so it beats only the shared rate.
    slow = [r for r in grid if r["strategy"] != "fast"] + [
        record("fast", seed, [(0, 0.5), (200, 0.8), (400, 0.9)]) for seed in (0, 1)
    ]
    (line,) = tuning_verdict(settings, slow, tuned)
    assert "No strategy is shown to beat the tuned baseline" in line
    assert "tuning the learning rate is the better saving" in line and "4.00" in line


def test_the_sweep_trains_each_rate_but_the_shared_one_with_every_seed_and_checks_each_rate(tmp_path):
    settings = settings_for(tmp_path, rates=(SHARED, 1e-2))
    assert [run.name for run in settings.tuning_runs()] == ["baseline@lr0.01-seed0", "baseline@lr0.01-seed1"]
    assert settings.options_for(settings.tuning_runs()[0]).learning_rate == 1e-2
    assert settings.options_for(settings.grid()[0]).learning_rate == SHARED
    assert settings_for(tmp_path, rates="1e-2,3e-2").tune_learning_rates == [1e-2, 3e-2]
    for bad, shown in ((0, "0"), ("abc", "'abc'"), (float("nan"), "nan"), (None, "None")):
        with pytest.raises(CompareInputError, match=f"--tune-learning-rates must be a finite number > 0, got {shown}"):
            settings_for(tmp_path, rates=[1e-3, bad])
    with pytest.raises(CompareInputError, match="distinct"):
        settings_for(tmp_path, rates=[1e-3, 1e-3])
    assert not (tmp_path / "cmp").exists()


def test_a_report_has_the_section_and_the_sweep_is_absent_without_the_option(tmp_path):
    from dataflex_callbacks.recipes.compare.report import render_report

    grid, tuned = sweep()
    report = render_report(settings_for(tmp_path), GridOutcome(records=grid, tuned=tuned))
    section = report.split("## Against the tuned baseline")[1].split("\n## ")[0]
    assert "Fastest plain-GRPO learning rate: 0.01 (`baseline@lr0.01`)." in section
    assert "| `fast` |" in section and "| 0.01 (fastest) |" in section and "| 0.003 (shared) |" in section
    plain = CompareSettings(
        strategies=["baseline", "fast"],
        seeds=[0, 1],
        budget=Budget.parse("completions:400"),
        output_dir=str(tmp_path / "plain"),
        progress=False,
    )
    assert "Against the tuned baseline" not in render_report(plain, GridOutcome(records=grid))


TINY = ["--seeds", "0", "--no-progress", "--jobs", "1", "--prompts-per-step", "4", "--num-generations", "4"]


def test_a_real_comparison_trains_the_sweep_and_reports_it(tmp_path, capsys, monkeypatch):
    from dataflex_callbacks.recipes.cli import main
    from dataflex_callbacks.recipes.compare import grid as grid_module

    folder = tmp_path / "cmp"
    args = ["compare", "--strategies", "baseline,difffilter", "--budget", "steps:2", "--eval-points", "0", *TINY]
    args += ["--suite", "toy", "--n-test", "8", "--output-dir", str(folder)]
    assert main([*args, "--tune-learning-rates", "3e-3,1e-2"]) == 0
    console = capsys.readouterr().out
    runs = sorted(p.name for p in (folder / "runs").iterdir())
    assert runs == ["baseline-seed0", "baseline@lr0.01-seed0", "difffilter-seed0"]  # 3e-3 is the shared rate
    with open(folder / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = {row["strategy"]: row for row in reader}
    assert set(rows) == {"baseline", "difffilter", "baseline@lr0.01"}
    assert rows["baseline@lr0.01"]["learning_rate"] == "0.01" and rows["baseline"]["learning_rate"] == "0.003"
    for column in (
        "tuned_baseline_final_fastest_lr",
        "tuned_baseline_final_x_fastest",
        "tuned_baseline_final_x_baseline",
    ):
        assert column in reader.fieldnames
    report = (folder / "report.md").read_text()
    assert "## Against the tuned baseline" in report and "| `difffilter` |" in report
    assert "against the tuned baseline: completions to reach" in console
    # A changed list resumes: only the new rate trains.
    computed = []
    real = grid_module.execute_run
    monkeypatch.setattr(
        grid_module, "execute_run", lambda s, run, *a, **k: computed.append(run.name) or real(s, run, *a, **k)
    )
    assert main([*args, "--tune-learning-rates", "1e-2,3e-2"]) == 0
    assert computed == ["baseline@lr0.03-seed0"]
    assert main([*args, "--tune-learning-rates", "0,1e-2"]) == 2
    assert "--tune-learning-rates must be a finite number > 0, got 0" in capsys.readouterr().err
