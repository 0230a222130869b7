"""compare.verdict: the plain-words verdict that ends report.md and the console, on records shaped as results.py
writes them: a strategy helps only where a paired interval over seeds says so, in the unit it saves."""

import math

import pytest

from dataflex_callbacks.recipes.compare import Budget, CompareSettings, stats
from dataflex_callbacks.recipes.compare.cli import summary_lines
from dataflex_callbacks.recipes.compare.grid import GridOutcome
from dataflex_callbacks.recipes.compare.reach import reach_levels, strategy_reach
from dataflex_callbacks.recipes.compare.report import paired_differences, render_report
from dataflex_callbacks.recipes.compare.verdict import RESOLUTION_TARGET, seeds_to_resolve, verdict_lines

from .test_reach import record

LEVELS = (0.70, 0.72, 0.74, 0.76)  # the baseline's final headline per seed


def grid(strategies: dict, seeds: int = 3) -> list[dict]:
    """Records of `base` and of each strategy in `strategies`: name -> per seed `(reach, final)`, the completions at
    which its headline curve reaches the baseline's final headline of that seed, and its own final headline above
    that level. `base` climbs from 0.3 and reaches its level at 300 completions, then stays there."""
    records = []
    for seed in range(seeds):
        level = LEVELS[seed]
        records.append(record("base", seed, [(0, 0.3), (300, level), (400, level)]))
        for name, per_seed in strategies.items():
            reach, final = per_seed[seed]
            records.append(record(name, seed, [(0, 0.3), (reach, level), (max(reach, 400) + 100, final)]))
    return records


def settings(tmp_path, strategies, seeds=3, cost_model=None):
    return CompareSettings(
        strategies=["base", *strategies],
        seeds=list(range(seeds)),
        budget=Budget.parse("completions:400"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
        cost_model=cost_model,
    )


def verdict_of(tmp_path, records, strategies, seeds=3, cost_model=None) -> list[str]:
    chosen = settings(tmp_path, strategies, seeds, cost_model)
    return verdict_lines(chosen, records, paired_differences(chosen, records), None)


def test_a_strategy_that_needs_fewer_completions_in_every_seed_is_said_to_save_them_with_its_paired_interval(tmp_path):
    # `fast` reaches each seed's level at 140-160 completions where the baseline needs 300: about 0.5x.
    records = grid({"fast": [(140, 0.80), (150, 0.82), (160, 0.85)]})
    lines = verdict_of(tmp_path, records, ["fast"], cost_model="gen_token=1.0,train_token=0.3")
    level = reach_levels(records, "base", None)[0][1]
    ratio = strategy_reach(records, "fast", "base", level, "completions").ratio
    assert ratio.high < 1.0  # the paired interval itself excludes 1x
    saves = [line for line in lines if line.startswith("- `fast` saves ")]
    assert len(saves) == 1
    assert f"completions: {ratio.mean:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]" in saves[0]
    assert "to reach the baseline's final accuracy on the same seed" in saves[0]
    # Tokens and seconds are proportional to completions in these records. Both strategies reach each level at their
    # first step after the start (ratio 1x): no step is saved. Trained tokens are not recorded, so they cannot be
    # claimed, nor the cost model's unit, which needs them.
    assert "generated tokens:" in saves[0] and "training seconds:" in saves[0]
    assert "optimizer steps" not in saves[0]
    assert "trained tokens" not in saves[0] and "modelled cost" not in saves[0]
    assert not any("No strategy is shown to help" in line for line in lines)
    assert any(line.startswith("- Certainty: 3 seeds") for line in lines)


def test_when_no_interval_excludes_1x_or_0_the_verdict_says_no_strategy_is_shown_to_help(tmp_path):
    # `noisy` reaches the level sooner on one seed and later on two; its final headline differs +0.10, 0, +0.02.
    records = grid({"noisy": [(200, LEVELS[0] + 0.10), (420, LEVELS[1]), (330, LEVELS[2] + 0.02)]})
    level = reach_levels(records, "base", None)[0][1]
    ratio = strategy_reach(records, "noisy", "base", level, "completions").ratio
    assert ratio.low < 1.0 < ratio.high
    lines = verdict_of(tmp_path, records, ["noisy"])
    assert "- No strategy is shown to help: no paired interval excludes 1x (compute) or 0 (headline)." in lines
    assert not any(line.startswith("- `noisy` ") for line in lines)  # no finding: saves, ends higher, needs more
    assert "- Shown neither to help nor to hurt: `noisy` (no paired interval of theirs excludes 1x or 0)." in lines


def test_a_strategy_whose_interval_lies_above_1x_needs_more_and_does_not_help(tmp_path):
    records = grid({"slow": [(600, LEVELS[0]), (640, LEVELS[1]), (580, LEVELS[2])]})
    lines = verdict_of(tmp_path, records, ["slow"])
    assert lines[0].startswith("- No strategy is shown to help")
    costs = [line for line in lines if line.startswith("- `slow` needs more completions: ")]
    assert len(costs) == 1 and "of the baseline's, to reach" in costs[0]
    assert not any("`slow` saves" in line for line in lines)


def test_a_higher_headline_at_the_same_budget_is_the_help_of_a_strategy_that_saves_no_compute(tmp_path):
    # `better` reaches each level when the baseline does (ratio 1x) but ends 0.05-0.07 above it.
    records = grid({"better": [(300, LEVELS[0] + 0.05), (300, LEVELS[1] + 0.06), (300, LEVELS[2] + 0.07)]})
    lines = verdict_of(tmp_path, records, ["better"])
    paired = paired_differences(settings(tmp_path, ["better"]), records)["better"]["interval"]
    higher = [line for line in lines if line.startswith("- `better` ends higher at the same budget")]
    assert len(higher) == 1 and f"{paired.mean:+.3f} [{paired.low:+.3f}, {paired.high:+.3f}]" in higher[0]
    assert not any("`better` saves" in line for line in lines)


def test_with_one_seed_no_interval_can_be_given_and_nothing_is_claimed(tmp_path):
    records = grid({"fast": [(100, 0.9)]}, seeds=1)
    lines = verdict_of(tmp_path, records, ["fast"], seeds=1)
    assert lines[0].startswith("- With 1 seed paired with the baseline no interval can be given")
    assert "- Next: run 3 seeds or more (`--num-seeds 3`; a resumed comparison trains only the new runs)." in lines
    assert not any(line.startswith("- `fast` ") for line in lines)


def test_wide_intervals_suggest_the_seeds_that_would_resolve_the_target_difference(tmp_path):
    records = grid({"noisy": [(200, LEVELS[0] + 0.10), (420, LEVELS[1]), (330, LEVELS[2] + 0.02)]})
    paired = paired_differences(settings(tmp_path, ["noisy"]), records)["noisy"]
    needed = seeds_to_resolve(paired)
    # An independent check: the first seed count whose t(n-1) x SE, SE shrunk as 1/sqrt(n), is under the target.
    half_width = [stats.t_critical(n - 1) * paired["standard_error"] * math.sqrt(3 / n) for n in range(3, 1001)]
    assert needed == 3 + next(i for i, h in enumerate(half_width) if h < RESOLUTION_TARGET)
    lines = verdict_of(tmp_path, records, ["noisy"])
    wide = [line for line in lines if line.startswith("- Next: intervals are wide for `noisy`")]
    assert len(wide) == 1 and f"`--num-seeds {needed}`" in wide[0]


def test_a_baseline_that_did_not_learn_gets_a_learning_rate_check_and_one_that_learned_does_not(tmp_path):
    fast = {"fast": [(140, 0.80), (150, 0.82), (160, 0.85)]}
    learned = verdict_of(tmp_path, grid(fast), ["fast"])
    assert not any("learning rate" in line for line in learned)
    # The baseline's headline rises 0, 0 and 0.04 on its three seeds: its change interval includes 0.
    records = grid(fast)
    for r in records:
        if r["strategy"] == "base":
            r["headline"]["before"] = [0.70, 0.72, 0.70][r["seed"]]
    stuck = verdict_of(tmp_path, records, ["fast"])
    check = [line for line in stuck if "learning rate" in line]
    assert len(check) == 1 and check[0].startswith("- Next: `base` (the baseline) did not clearly learn")
    assert "`--learning-rate`" in check[0]


def test_the_report_and_the_console_end_with_the_verdict_and_the_signal_figure_is_near_the_top(tmp_path):
    records = grid({"fast": [(140, 0.80), (150, 0.82), (160, 0.85)]})
    for r in records:  # as results.py writes them from the run's config.json
        r.update(signal_groups=40 if r["strategy"] == "base" else 50, zero_signal_completions=80)
    chosen = settings(tmp_path, ["fast"])
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    report = render_report(chosen, outcome)
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections[-1] == "## Verdict"
    verdict = report.split("## Verdict\n", 1)[1].strip().splitlines()
    assert verdict == verdict_lines(chosen, records, paired_differences(chosen, records), None)
    top = report.split("## Compute to reach the target", 1)[0]
    # base: 3 runs x 400 completions over 3 x 40 signal groups; fast: 3 x 500 over 3 x 50.
    assert "| `base` | 10.00 | 80 |" in top and "| `fast` | 10.00 | 80 |" in top
    console = summary_lines(chosen, outcome)
    tail = console[console.index("verdict:") + 1 :]
    assert tail == [f"  {line.replace('`', '')}" for line in verdict] and console[-1] == tail[-1]


def test_all_equal_accuracies_give_no_verdict(tmp_path):
    records = grid({"same": [(300, LEVELS[0]), (300, LEVELS[1]), (300, LEVELS[2])]})
    for r in records:  # every held-out figure of every run the same number
        r["headline"].update(before=0.5, after=0.5)
        r["before"] = r["after"] = {"overall": 0.5, "a": 0.5}
        r["sampled_pass_at_1"].update(before={"overall": 0.5, "a": 0.5}, after={"overall": 0.5, "a": 0.5})
        for point in r["curve"]:
            point.update(headline=0.5, accuracy={"overall": 0.5, "a": 0.5})
            point["sampled_pass_at_1"] = {"overall": 0.5, "a": 0.5}
    report = render_report(settings(tmp_path, ["same"]), GridOutcome(records=records))
    verdict = report.split("## Verdict\n", 1)[1]
    assert "- No verdict: all held-out accuracies are equal" in verdict and "saves" not in verdict


@pytest.mark.parametrize("seeds", [2, 3])
def test_seeds_to_resolve_is_none_without_an_interval_and_the_current_count_when_already_resolved(seeds):
    assert seeds_to_resolve({"seeds": [0], "standard_error": math.nan}) is None
    assert seeds_to_resolve({"seeds": list(range(seeds)), "standard_error": 0.0}) == seeds


def test_the_signal_table_says_when_no_group_trained_and_when_the_counts_were_not_recorded(tmp_path):
    from dataflex_callbacks.recipes.compare.report import signal_table

    records = grid({"idle": [(300, LEVELS[0])], "old": [(300, LEVELS[0])]}, seeds=1)
    for r in records:
        if r["strategy"] != "old":  # "old": a result written before the signal counts were
            r.update(signal_groups=0 if r["strategy"] == "idle" else 8, zero_signal_completions=400)
    table = signal_table(records, ["base", "idle", "old"])
    assert "| `base` | 50.00 | 400 |" in table
    assert "| `idle` | no signal group trained | 400 |" in table
    assert "| `old` | n/a (not recorded) | n/a |" in table


def test_a_ratio_that_is_only_a_bound_is_never_claimed_as_a_saving(tmp_path):
    # `quick` climbs to 0.95 by 150 completions, so it reaches every seed's level (0.70-0.76) at about 0.3x the
    # baseline's 300; the target 0.9 it reaches at about 140, the baseline never (it ends at its level, spending 400):
    # that ratio is an upper bound, however far below 1x, and is not a saving.
    records = [r for r in grid({}) if r["strategy"] == "base"]
    records += [record("quick", seed, [(0, 0.3), (150, 0.95), (500, 0.95)]) for seed in range(3)]
    chosen = settings(tmp_path, ["quick"])
    chosen.target = 0.9
    target_ratio = strategy_reach(records, "quick", "base", 0.9, "completions")
    assert target_ratio.ratio_bound == "upper" and target_ratio.ratio.high < 1.0
    lines = verdict_lines(chosen, records, paired_differences(chosen, records), None)
    saves = [line for line in lines if line.startswith("- `quick` saves ")]
    assert len(saves) == 1 and "the baseline's final accuracy" in saves[0] and "the target" not in saves[0]


def test_a_censored_strategy_whose_lower_bound_lies_above_1x_is_said_to_need_more_at_least(tmp_path):
    # `stuck` never reaches its level in seed 2; in seeds 0 and 1 it needs about 2x the baseline's 300.
    records = grid({"stuck": [(600, LEVELS[0]), (620, LEVELS[1]), (590, LEVELS[2])]})
    for r in records:
        if r["strategy"] == "stuck" and r["seed"] == 2:  # ends below the level: censored at 690 completions
            r["curve"][-1]["headline"] = r["headline"]["after"] = LEVELS[2] - 0.05
    lines = verdict_of(tmp_path, records, ["stuck"])
    more = [line for line in lines if line.startswith("- `stuck` needs more ")]
    assert len(more) == 1 and "completions: more than " in more[0] and "a lower bound" in more[0]
    assert "seed 2" in more[0] and not any("`stuck` saves" in line for line in lines)
