"""Compute to reach a target accuracy, the report's headline: per seed, not reached, --target, the paired ratio,
its place in report.md, both accuracy figures, and tokens and training seconds on real curve points."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dataflex_callbacks.recipes.compare import Budget, CompareInputError, CompareSettings, stats
from dataflex_callbacks.recipes.compare.grid import GridOutcome
from dataflex_callbacks.recipes.compare.reach import headline_section, strategy_reach
from dataflex_callbacks.recipes.compare.results import result_problem


def headline_block(before, after, metric="sampled_pass_at_1", rows=100):
    """A result's ``headline`` (eval.json's): sampled pass@1 on every held-out prompt, unless `metric` says greedy."""
    sampled = {"k": 4, "temperature": 1.0} if metric == "sampled_pass_at_1" else {}
    return {"metric": metric, **sampled, "levels": None, "rows": rows, "before": before, "after": after}


def record(strategy, seed, points, tokens_per_completion=4.0, seconds_per_completion=0.01, greedy_offset=0.0):
    """A result record whose headline curve is `points` [(completions, accuracy)] (sampled pass@1 on every held-out
    prompt, overall and of its one domain `a`), greedy accuracy `greedy_offset` above it; tokens and seconds
    proportional to the completions."""
    curve = [
        {
            "step": i,
            "completions": c,
            "completion_tokens": int(c * tokens_per_completion),
            "wall_seconds": c * seconds_per_completion,
            "accuracy": {"overall": a + greedy_offset, "a": a + greedy_offset},
            "sampled_pass_at_1": {"overall": a, "a": a},
            "headline": a,
        }
        for i, (c, a) in enumerate(points)
    ]
    return {
        "strategy": strategy,
        "seed": seed,
        "name": f"{strategy}-seed{seed}",
        "budget": "completions:400",
        "steps": len(points) - 1,
        "completions": curve[-1]["completions"],
        "completion_tokens": curve[-1]["completion_tokens"],
        "wall_seconds": curve[-1]["wall_seconds"] + 5.0,
        "kept_frac": 1.0,
        "before": curve[0]["accuracy"],
        "after": curve[-1]["accuracy"],
        "sampled_pass_at_1": {
            "k": 4,
            "temperature": 1.0,
            "before": curve[0]["sampled_pass_at_1"],
            "after": curve[-1]["sampled_pass_at_1"],
        },
        "headline": headline_block(curve[0]["headline"], curve[-1]["headline"]),
        "curve": curve,
        "proportions": [{"step": 1, "sampled": {"a": 1.0}, "target": None}],
        "run_dir": "runs/x",
        "domains": ["a"],
        "shared_key": "k",
    }


def scores(value):
    """A held-out evaluation (`HeldOutScores`) whose every figure is `value`."""
    from dataflex_callbacks.recipes.held_out import HeldOutScores

    return HeldOutScores({"overall": value}, {"overall": value}, value)


def grid_records():
    # Baseline final accuracies 0.6 and 0.8: level 0.7, which seed 1 reaches at 300 and seed 0 never (it ends at 0.6).
    return [
        record("base", 0, [(0, 0.5), (200, 0.4), (400, 0.6)]),
        record("base", 1, [(0, 0.5), (200, 0.6), (400, 0.8)]),
        record("fast", 0, [(0, 0.5), (200, 0.8), (400, 0.9)]),
        record("fast", 1, [(0, 0.5), (100, 0.9), (400, 0.9)]),
    ]


def settings_for(tmp_path, strategies=("base", "fast"), target=None):
    return CompareSettings(
        strategies=list(strategies),
        seeds=[0, 1],
        budget=Budget.parse("completions:400"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
        target=target,
    )


def test_reach_is_measured_per_seed_on_each_seeds_own_curve_in_every_unit():
    records = grid_records()
    fast = strategy_reach(records, "fast", "base", 0.7)
    # Seed 0 crosses 0.7 between 0 (0.5) and 200 (0.8): 200 * 0.2 / 0.3;
    # seed 1 between 0 and 100 (0.9): 100 * 0.2 / 0.4.
    assert fast.per_seed == pytest.approx({0: 400 / 3, 1: 50.0})
    assert fast.interval.mean == pytest.approx((400 / 3 + 50) / 2)
    assert strategy_reach(records, "fast", "base", 0.7, "completion_tokens").per_seed == pytest.approx(
        {0: 4 * 400 / 3, 1: 200.0}, abs=1
    )
    assert strategy_reach(records, "fast", "base", 0.7, "wall_seconds").per_seed == pytest.approx({0: 4 / 3, 1: 0.5})
    # Seed 1 of the baseline crosses 0.7 between 200 (0.6) and 400 (0.8): at 300.
    assert strategy_reach(records, "base", "base", 0.7).per_seed[1] == pytest.approx(300.0)


def test_a_seed_whose_curve_ends_below_the_level_is_shown_as_more_than_its_run_spent_never_left_blank():
    records = grid_records()
    base = strategy_reach(records, "base", "base", 0.7)
    assert math.isnan(base.per_seed[0]) and base.censored == [0] and base.interval is None
    assert base.bounded() == pytest.approx({0: 400.0, 1: 300.0})  # seed 0 needs more than the 400 its run spent
    table = "\n".join(headline_section(records, ["base", "fast"], "base", 0.7))
    assert "| `base` | > 350 (not reached in 1 of 2 seeds; per seed: 0: > 400, 1: 300) | 1 (reference) |" in table
    # The baseline's seed 0 is censored: fast's paired ratio (133/400 on seed 0, 50/300 on seed 1) is an upper bound.
    fast = strategy_reach(records, "fast", "base", 0.7)
    assert fast.ratio_bound == "upper" and fast.censored_pairs == [0]
    assert fast.ratio.mean == pytest.approx(math.sqrt((400 / 3 / 400) * (50 / 300)))
    assert "< 0.24 [0, " in table and "upper bound: the baseline not reached" in table
    # Neither reaches 0.95 in any seed: no bound on the ratio, and the seeds are named, not dropped.
    never = "\n".join(headline_section(records, ["base", "fast"], "base", 0.95))
    assert (
        "| `fast` | > 400 (not reached in 2 of 2 seeds; per seed: 0: > 400, 1: > 400) | n/a "
        "(neither reached it within the budget in seed 0, 1: no bound on the ratio) |" in never
    )


def test_the_ratio_to_the_baseline_is_paired_by_seed():
    # The baseline's reach differs 100-fold between seeds; `half` needs exactly half of it in every seed.
    records, reaches = [], {0: 100, 1: 1000, 2: 10000}
    for seed, reach in reaches.items():
        records.append(record("base", seed, [(0, 0.0), (reach, 0.5), (20000, 0.5)]))
        records.append(record("half", seed, [(0, 0.0), (reach / 2, 0.5), (20000, 0.5)]))
    half = strategy_reach(records, "half", "base", 0.5)
    assert half.ratio.mean == pytest.approx(0.5) and half.ratio.n == 3
    assert half.ratio.high - half.ratio.low < 1e-6  # paired: the seeds' 100-fold spread cancels
    # An independent reference: the paired bootstrap interval of the per-seed log-ratios, exponentiated.
    records.append(record("mixed", 0, [(0, 0.0), (25, 0.5), (20000, 0.5)]))
    records.append(record("mixed", 1, [(0, 0.0), (500, 0.5), (20000, 0.5)]))
    records.append(record("mixed", 2, [(0, 0.0), (10000, 0.5), (20000, 0.5)]))
    mixed = strategy_reach(records, "mixed", "base", 0.5)
    logs = stats.paired_bootstrap_interval(np.log([25 / 100, 500 / 1000, 10000 / 10000]))
    assert (mixed.ratio.mean, mixed.ratio.low, mixed.ratio.high) == pytest.approx(
        (math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high))
    )
    assert mixed.ratio.low < mixed.ratio.mean < mixed.ratio.high


def test_the_baseline_level_is_each_seeds_own_final_accuracy_so_the_baseline_reaches_it_in_every_seed():
    from dataflex_callbacks.recipes.compare.reach import reach_levels

    records = grid_records()
    ((name, level),) = reach_levels(records, "base", None)
    assert level == {0: 0.6, 1: 0.8}
    base = strategy_reach(records, "base", "base", level)
    assert base.per_seed == pytest.approx({0: 400.0, 1: 400.0}) and base.reached == 2
    fast = strategy_reach(records, "fast", "base", level)
    # Seed 0 reaches 0.6 at 200 * 0.1 / 0.3, seed 1 reaches 0.8 at 100 * 0.3 / 0.4; paired ratios 1/6 and 3/16.
    assert fast.per_seed == pytest.approx({0: 200 / 3, 1: 75.0})
    assert fast.ratio.mean == pytest.approx(math.sqrt((200 / 3 / 400) * (75 / 400)))


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, float("nan"), "high", True])
def test_a_target_outside_0_1_is_refused(tmp_path, bad):
    with pytest.raises(CompareInputError, match=r"--target must be a headline value above 0 and at most 1"):
        settings_for(tmp_path, target=bad)


def test_the_target_flag_reaches_the_settings_the_api_and_the_report(tmp_path, capsys):
    from dataflex_callbacks.recipes.cli import build_parser, main
    from dataflex_callbacks.recipes.compare import compare
    from dataflex_callbacks.recipes.compare.cli import settings_from_args

    args = build_parser().parse_args(["compare", "--target", "0.85", "--output-dir", str(tmp_path / "c")])
    assert settings_from_args(args).target == pytest.approx(0.85)
    assert main(["compare", "--target", "1.5", "--output-dir", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "--target must be a headline value" in capsys.readouterr().err and not (tmp_path / "c").exists()
    with pytest.raises(CompareInputError, match="--target"):
        compare(["baseline"], target=0, output_dir=str(tmp_path / "c"), progress=False)
    assert not (tmp_path / "c").exists()
    table = "\n".join(headline_section(grid_records(), ["base", "fast"], "base", 0.85))
    # The target: `fast` reaches 0.85 at 200 + 200 * 0.05 / 0.1 (seed 0) and 100 * 0.35 / 0.4 (seed 1).
    assert "### The target: 0.850" in table and "| `base` | > 400 (not reached in 2 of 2" in table
    fast = strategy_reach(grid_records(), "fast", "base", 0.85)
    assert fast.per_seed == pytest.approx({0: 300.0, 1: 87.5})


def test_the_headline_is_the_reports_first_section_and_the_console_prints_it(tmp_path):
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.report import render_report

    records = grid_records()
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    report = render_report(settings_for(tmp_path, target=0.85), outcome)
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections[:3] == [
        "## Compute to reach the target",
        "## Held-out accuracy after training",
        "## Paired difference to the baseline `base`",
    ]
    assert report.index("- budget per run:") < report.index("## Compute to reach the target")
    assert (
        "### The baseline's final accuracy on the same seed: 0.700 (per seed: 0.600-0.800)" in report
        and "### The target: 0.850" in report
    )
    assert "figures/accuracy_vs_tokens.png" in report and "figures/accuracy_vs_completions.png" in report
    lines = summary_lines(settings_for(tmp_path, target=0.85), outcome)
    assert lines[0] == "headline: held-out sampled pass@1 (k=4, T=1) on every held-out prompt (100 prompts)"
    assert lines[1].startswith(
        "completions to reach the baseline's final accuracy on the same seed (0.700 (per seed: 0.600-0.800))"
    )
    assert lines[2] == "  base             400 [400, 400]"  # each seed reaches its own final accuracy at its end
    assert lines[3].startswith("  fast             71 [")  # mean of 66.7 (0.6 on seed 0) and 75 (0.8 on seed 1)
    assert lines[3].endswith("x baseline: 0.18 [0.08, 0.37]")  # paired: 1/6 on seed 0, 3/16 on seed 1
    assert lines[4].startswith("completions to reach the target (0.850)")
    assert lines[5] == ("  base             > 400 (not reached in 2 of 2 seeds; per seed: 0: > 400, 1: > 400)")
    assert any(line.startswith("  fast             - base: ") for line in lines[6:])


def test_every_accuracy_figure_names_the_strategies_and_draws_the_levels_dashed(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from dataflex_callbacks.recipes.compare.report import write_report

    drawn, titles = {}, {}
    real_savefig = Figure.savefig

    def savefig(figure, path, *args, **kwargs):
        axis = figure.axes[0]
        dashed = [line.get_ydata()[0] for line in axis.get_lines() if line.get_linestyle() == "--"]
        legend = figure.legends[0] if figure.legends else axis.get_legend()  # the accuracy grid's is below it
        drawn[str(path).rsplit("/", 1)[-1]] = (axis.get_xlabel(), [t.get_text() for t in legend.get_texts()], dashed)
        titles[str(path).rsplit("/", 1)[-1]] = [panel.get_title() for panel in figure.axes]
        return real_savefig(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    records = grid_records()
    paths = write_report(settings_for(tmp_path, target=0.85), GridOutcome(records=records))
    for name, label in (
        ("accuracy_vs_steps.png", "optimizer steps"),
        ("accuracy_vs_completions.png", "completions generated"),
        ("accuracy_vs_tokens.png", "completion tokens generated"),
    ):
        assert paths[name].endswith(f"figures/{name}") and (tmp_path / "cmp" / "figures" / name).stat().st_size > 5000
        xlabel, legend, dashed = drawn[name]
        assert xlabel == label
        # The headline first (the levels are drawn on it), greedy accuracy beside it, then each domain.
        assert titles[name] == ["headline", "greedy accuracy: overall", "sampled pass@1: a"]
        assert legend == [
            "base",
            "fast",
            "the baseline's final accuracy on the same seed (0.700 (per seed: 0.600-0.800))",
            "the target (0.850)",
        ]
        assert dashed == pytest.approx([0.7, 0.85])


def test_results_written_before_tokens_and_seconds_load_and_read_n_a(tmp_path):
    from dataflex_callbacks.recipes.compare.report import write_report

    records = grid_records()
    for r in records:
        for point in r["curve"]:
            del point["completion_tokens"], point["wall_seconds"]
        assert result_problem(r) is None  # kept, not recomputed
    fast = strategy_reach(records, "fast", "base", 0.7, "completion_tokens")
    assert not fast.recorded and fast.per_seed == {}
    table = "\n".join(headline_section(records, ["base", "fast"], "base", None))
    assert "| `fast` | 71 [" in table and "n/a (not recorded) | n/a (not recorded) |" in table
    paths = write_report(settings_for(tmp_path), GridOutcome(records=records))
    assert paths["accuracy_vs_tokens.png"] == str(tmp_path / "cmp" / "figures" / "accuracy_vs_tokens.png")
    assert (tmp_path / "cmp" / "figures" / "accuracy_vs_tokens.png").stat().st_size > 0


def test_training_seconds_exclude_the_evaluations_along_the_way():
    import time

    from dataflex_callbacks.recipes.compare.budget import GenerationLedger, budget_callback

    def slow_evaluate(model, tokenizer):
        time.sleep(0.3)
        return scores(0.5)

    ledger = GenerationLedger(Budget.parse("steps:3"))
    callback = budget_callback(ledger, slow_evaluate, eval_points=2)
    args = SimpleNamespace(
        steps_per_generation=1, num_iterations=1, generation_batch_size=4, gradient_accumulation_steps=1
    )
    control = SimpleNamespace(should_log=False, should_training_stop=False)
    callback.on_train_begin(args, None, control)
    for step in (1, 2, 3):
        callback.on_step_end(args, SimpleNamespace(global_step=step), control)
    callback.on_train_end(args, None, control)
    assert [p["step"] for p in callback.curve] == [1, 2]
    # Two evaluations of 0.3 s ran; the training between them took a few milliseconds.
    assert callback.curve[1]["wall_seconds"] < 0.2 and callback.train_seconds() < 0.2
    assert [p["completions"] for p in callback.curve] == [4, 8]


def test_real_curve_points_record_completion_tokens_and_training_seconds(tmp_path, capsys):
    pytest.importorskip("trl")
    from dataflex_callbacks.recipes.cli import main

    # Tiny: 1 strategy x 1 seed x 2 steps of 2 prompts x 2 completions, one evaluation after step 1.
    assert (
        main(
            [
                "compare",
                "--strategies",
                "baseline",
                "--seeds",
                "0",
                "--budget",
                "steps:2",
                "--eval-points",
                "1",
                "--no-progress",
                "--prompts-per-step",
                "2",
                "--num-generations",
                "2",
                "--jobs",
                "1",
                "--target",
                "0.9",
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "out" / "runs" / "baseline-seed0" / "result.json").read_text())
    curve = result["curve"]
    assert [p["step"] for p in curve] == [0, 1, 2]
    assert (curve[0]["completion_tokens"], curve[0]["wall_seconds"]) == (0, 0.0)
    assert 0 < curve[1]["completion_tokens"] < curve[2]["completion_tokens"] == result["completion_tokens"]
    assert 0 < curve[1]["wall_seconds"] < curve[2]["wall_seconds"] < result["wall_seconds"]
    # Issue 39.5: trained tokens (plain GRPO trains every response) and the seconds split into generation and update.
    assert 0 < curve[1]["trained_tokens"] <= curve[1]["completion_tokens"]
    assert curve[2]["trained_tokens"] == result["trained_tokens"] <= result["completion_tokens"]
    for point in curve[1:]:
        assert point["generation_seconds"] > 0 and point["update_seconds"] > 0
        assert point["generation_seconds"] + point["update_seconds"] == pytest.approx(point["wall_seconds"], abs=2e-3)
    out = capsys.readouterr().out
    assert "optimizer steps to reach the target (0.900)" in out
    assert (
        "completions to reach the baseline's final accuracy" in out and "completions to reach the target (0.900)" in out
    )
    report = (tmp_path / "out" / "report.md").read_text()
    assert [line for line in report.splitlines() if line.startswith("## ")][0] == "## Compute to reach the target"
    assert (tmp_path / "out" / "figures" / "accuracy_vs_tokens.png").stat().st_size > 0


def test_compute_to_reach_intervals_never_go_below_zero():
    from dataflex_callbacks.recipes.compare.reach import reach_cell

    # The baseline's final accuracy is each seed's level; `fast` reaches it at 10 and at 390 completions: mean 200,
    # a Student-t half-width of about 2400 with 2 seeds, which must not read as a negative cost.
    records = [
        record("base", 0, [(0, 0.5), (400, 0.6)]),
        record("base", 1, [(0, 0.5), (400, 0.8)]),
        record("fast", 0, [(0, 0.5), (20, 0.7), (400, 0.7)]),
        record("fast", 1, [(0, 0.5), (390, 0.8), (400, 0.9)]),
    ]
    level = {0: 0.6, 1: 0.8}
    for axis in ("completions", "completion_tokens", "wall_seconds"):
        reach = strategy_reach(records, "fast", "base", level, axis)
        assert reach.interval.low >= 0.0 and reach.interval.high > reach.interval.mean > 0
        assert "[-" not in reach_cell(reach)


# --------------------------------------------------------------------------- every unit (issue 39.5)


def unit_record(strategy, seed, points):
    """A result record whose curve is `points` [(step, completions, tokens, trained, gen s, update s, accuracy)]."""
    curve = [
        {
            "step": step,
            "completions": completions,
            "completion_tokens": tokens,
            "trained_tokens": trained,
            "wall_seconds": gen + update,
            "generation_seconds": gen,
            "update_seconds": update,
            "accuracy": {"overall": a, "a": a},
            "sampled_pass_at_1": {"overall": a, "a": a},
            "headline": a,
        }
        for step, completions, tokens, trained, gen, update, a in points
    ]
    base = record(strategy, seed, [(p["completions"], p["headline"]) for p in curve])
    return {**base, "curve": curve, "steps": curve[-1]["step"]}


def unit_records():
    # `dyn` (dynamic sampling) takes more completions per step but fewer steps, and trains fewer tokens.
    # Points: (step, completions, generated tokens, trained tokens, generation s, update s, accuracy).
    return [
        unit_record(
            "base",
            0,
            [(0, 0, 0, 0, 0.0, 0.0, 0.5), (10, 640, 3200, 3200, 6.0, 2.0, 0.6), (20, 1280, 6400, 6400, 12.0, 4.0, 0.7)],
        ),
        unit_record(
            "dyn",
            0,
            [(0, 0, 0, 0, 0.0, 0.0, 0.5), (4, 800, 4000, 1280, 7.5, 0.8, 0.8), (8, 1600, 8000, 2560, 15.0, 1.6, 0.8)],
        ),
    ]


def test_every_unit_is_computed_from_the_curve_points_of_a_hand_made_record():
    from dataflex_callbacks.recipes.compare.reach import AXES

    records = unit_records()
    # The level is the baseline's final 0.7; `dyn` crosses it between its first two points, at 2/3 of the way
    # (0.5 -> 0.8): 2/3 of the second point's value in every unit, by hand.
    expected = {
        "step": 4 * 2 / 3,
        "completions": 800 * 2 / 3,
        "completion_tokens": 4000 * 2 / 3,
        "trained_tokens": 1280 * 2 / 3,
        "wall_seconds": 8.3 * 2 / 3,
        "generation_seconds": 7.5 * 2 / 3,
        "update_seconds": 0.8 * 2 / 3,
    }
    assert set(expected) <= set(AXES)
    for axis, value in expected.items():
        reach = strategy_reach(records, "dyn", "base", {0: 0.7}, axis)
        assert reach.per_seed[0] == pytest.approx(value), axis
    # The baseline reaches its own final accuracy at its end: 20 steps, 6400 trained tokens, 12 s + 4 s.
    base = {axis: strategy_reach(records, "base", "base", {0: 0.7}, axis).per_seed[0] for axis in expected}
    assert (base["step"], base["trained_tokens"], base["generation_seconds"], base["update_seconds"]) == (
        20.0,
        6400.0,
        12.0,
        4.0,
    )


def test_the_modelled_cost_is_linear_in_generated_and_trained_tokens():
    from dataflex_callbacks.recipes.compare.cost_model import MODELLED_COST, CostModel, with_modelled_cost

    records = with_modelled_cost(unit_records(), CostModel(gen_token=1.0, train_token=0.3))
    # Point by point: 1.0 * generated tokens + 0.3 * trained tokens.
    assert [p[MODELLED_COST] for p in records[1]["curve"]] == pytest.approx([0.0, 4000 + 384, 8000 + 768])
    reach = strategy_reach(records, "dyn", "base", {0: 0.7}, MODELLED_COST)
    assert reach.per_seed[0] == pytest.approx((4000 + 0.3 * 1280) * 2 / 3)
    section = "\n".join(headline_section(unit_records(), ["base", "dyn"], "base", None, None, CostModel(1.0, 0.3)))
    header = "| trained tokens | x baseline | generation seconds | x baseline | update seconds | x baseline |"
    assert header + " modelled cost | x baseline |" in section
    assert "| 2923 (interval n/a: needs >= 2 seeds) | 0.35 (interval n/a: needs >= 2 seeds) |" in section
    # Without a cost model there is no such axis; a record lacking trained tokens gets no modelled cost.
    assert "modelled cost" not in "\n".join(headline_section(unit_records(), ["base", "dyn"], "base", None))
    old = grid_records()
    assert MODELLED_COST not in with_modelled_cost(old, CostModel(1.0, 0.3))[0]["curve"][0]


def test_the_report_and_the_console_give_steps_beside_completions(tmp_path):
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.reach import headline_console

    records = unit_records()
    table = "\n".join(headline_section(records, ["base", "dyn"], "base", None))
    header = next(line for line in table.splitlines() if line.startswith("| strategy |"))
    assert "| completions | x baseline | optimizer steps | x baseline |" in header
    # `dyn`: 2.67 steps against the baseline's 20 (x 0.13), 533 completions against 1280.
    row = next(line for line in table.splitlines() if line.startswith("| `dyn` |"))
    assert row.startswith("| `dyn` | 533 (interval n/a: needs >= 2 seeds) | 0.42 (interval n/a: needs >= 2 seeds) |")
    assert "| 3 (interval n/a: needs >= 2 seeds) | 0.13 (interval n/a: needs >= 2 seeds) |" in row
    for label in ("trained tokens", "generation seconds", "update seconds"):
        assert label in table
    lines = headline_console(records, ["base", "dyn"], "base", None)
    steps = lines.index(
        "optimizer steps to reach the baseline's final accuracy on the same seed (0.700), mean over "
        "seeds [95% interval], x baseline paired by seed:"
    )
    assert lines[steps + 2].startswith("  dyn              3 (interval n/a") and "x baseline: 0.13" in lines[steps + 2]
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    settings = CompareSettings(
        strategies=["base", "dyn"],
        seeds=[0],
        budget=Budget.parse("completions:1280"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
    )
    assert any(line.startswith("optimizer steps to reach") for line in summary_lines(settings, outcome))


def test_results_without_the_new_units_read_n_a_and_steps_are_always_known():
    records = grid_records()  # curve points with completions, tokens and wall seconds only, as written before 39.5
    for axis in ("trained_tokens", "generation_seconds", "update_seconds"):
        reach = strategy_reach(records, "fast", "base", 0.7, axis)
        assert not reach.recorded and reach.per_seed == {}
    table = "\n".join(headline_section(records, ["base", "fast"], "base", None))
    first, other_units = [line for line in table.splitlines() if line.startswith("| `fast` |")]
    assert "n/a (not recorded)" not in first
    assert other_units == "| `fast` |" + " n/a (not recorded) | n/a (not recorded) |" * 3
    # Every curve point always had its optimizer step: steps to reach are known for old results too.
    assert strategy_reach(records, "fast", "base", 0.7, "step").per_seed == pytest.approx({0: 2 / 3, 1: 0.5})


def test_curve_points_record_trained_tokens_and_generation_and_update_seconds():
    import time

    from dataflex_callbacks.recipes.compare.budget import KEPT_TOKENS_KEY, GenerationLedger, budget_callback

    class Trainer:
        def _generate_and_score_completions(self, inputs):
            time.sleep(0.2)
            return inputs

    ledger = GenerationLedger(Budget.parse("steps:3"))
    callback = budget_callback(ledger, lambda model, tokenizer: scores(0.5), eval_points=2)
    trainer = Trainer()
    callback.bind_trainer(trainer)
    args = SimpleNamespace(
        steps_per_generation=1, num_iterations=1, generation_batch_size=4, gradient_accumulation_steps=1
    )
    control = SimpleNamespace(should_log=True, should_training_stop=False)
    callback.on_train_begin(args, None, control)
    logs = [
        # A strategy that logs its kept tokens: trained tokens are exactly those.
        {"loss": 0.1, "completions/mean_length": 5.0, KEPT_TOKENS_KEY: 12.0, "dataflex/kept_frac": 0.5},
        # Plain GRPO logs none: every generated response is trained, 4 x 6 tokens.
        {"loss": 0.1, "completions/mean_length": 6.0},
        {"loss": 0.1, "completions/mean_length": 6.0},
    ]
    for step, log in enumerate(logs, start=1):
        assert trainer._generate_and_score_completions("batch") == "batch"
        time.sleep(0.05)  # the update
        state = SimpleNamespace(global_step=step)
        callback.on_step_end(args, state, control)
        callback.on_log(args, state, control, logs=log)
    callback.on_train_end(args, None, control)
    first, second = callback.curve
    assert (first["trained_tokens"], second["trained_tokens"]) == (12, 36)
    assert (first["completion_tokens"], second["completion_tokens"]) == (20, 44)
    assert 0.2 <= first["generation_seconds"] < 0.3 and 0.4 <= second["generation_seconds"] < 0.55
    assert 0.05 <= first["update_seconds"] < 0.15 and 0.1 <= second["update_seconds"] < 0.25
    assert first["generation_seconds"] + first["update_seconds"] == pytest.approx(first["wall_seconds"], abs=2e-3)
    assert ledger.trained_tokens == 12 + 24 + 24


def censored_grid():
    """`base` reaches each seed's final headline (0.7) at 300 of 400 completions; `late` reaches it at 450 of 600 in
    seeds 0 and 1 and never in seed 2 (it ends at 0.6 after 600 completions)."""
    records = []
    for seed in range(3):
        records.append(record("base", seed, [(0, 0.3), (300, 0.7), (400, 0.7)]))
        late = [(0, 0.3), (450, 0.7), (600, 0.7)] if seed < 2 else [(0, 0.3), (450, 0.5), (600, 0.6)]
        records.append(record("late", seed, late))
    return records


def test_a_strategy_censored_in_one_seed_keeps_that_seed_as_a_lower_bound_in_its_paired_ratio():
    records = censored_grid()
    level = {0: 0.7, 1: 0.7, 2: 0.7}
    late = strategy_reach(records, "late", "base", level)
    assert late.censored == [2] and late.bounded() == pytest.approx({0: 450.0, 1: 450.0, 2: 600.0})
    # Seed 2 enters at the 600 its run spent (not dropped): the ratio is a lower bound over all three seeds.
    assert late.ratio_bound == "lower" and late.censored_pairs == [2] and late.ratio.n == 3
    reference = stats.paired_ratio_interval([450, 450, 600], [300, 300, 300])
    assert (late.ratio.mean, late.ratio.low) == pytest.approx((reference.mean, reference.low))
    table = "\n".join(headline_section(records, ["base", "late"], "base", None))
    assert "| `late` | > 500 (not reached in 1 of 3 seeds; per seed: 0: 450, 1: 450, 2: > 600) |" in (table)
    bound = f"> {reference.mean:.2f} [{reference.low:.2f}, inf) (lower bound: the strategy not reached"
    assert bound in table


def test_the_results_csv_says_which_runs_were_censored_and_gives_what_they_spent(tmp_path):
    import csv

    from dataflex_callbacks.recipes.compare.results_csv import write_results_csv

    records = censored_grid()
    write_results_csv(str(tmp_path / "results.csv"), records, "base", 0.7)
    with open(tmp_path / "results.csv", newline="") as handle:
        rows = {row["strategy"] + row["seed"]: row for row in csv.DictReader(handle)}
    assert (rows["late2"]["reach_baseline_final_completions"], rows["late2"]["reach_baseline_final_censored"]) == (
        "600.0",
        "True",
    )
    assert rows["late2"]["reach_target_censored"] == "True" and rows["late2"]["reach_target_step"] == "2.0"
    assert (rows["late0"]["reach_baseline_final_completions"], rows["late0"]["reach_baseline_final_censored"]) == (
        "450.0",
        "False",
    )
    assert rows["base1"]["reach_baseline_final_completions"] == "300.0"
