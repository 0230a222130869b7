"""compare.report: completions to reach the baseline's final accuracy, against hand-computed curves."""

import math

import pytest

from dataflex_callbacks.recipes.compare.reach import cost_to_reach as completions_to_reach
from dataflex_callbacks.recipes.compare.reach import reach_table

from .test_reach import headline_block


def test_reach_is_the_last_crossing_from_below_interpolated():
    # Dips below 0.5, climbs through it between 20 and 30 (at 25), stays above.
    assert completions_to_reach([0, 10, 20, 30], [0.5, 0.3, 0.4, 0.6], 0.5) == pytest.approx(25.0)
    assert completions_to_reach([0, 10], [0.7, 0.6], 0.6) == 0.0  # never below
    assert math.isnan(completions_to_reach([0, 10, 20], [0.7, 0.8, 0.5], 0.6))  # ends below


def run(strategy, seed, curve):
    return {
        "strategy": strategy,
        "seed": seed,
        "curve": [{"completions": c, "accuracy": {"overall": a}, "headline": a} for c, a in curve],
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


def test_the_seed_mean_reach_table_is_labelled_as_a_secondary_view_under_the_headline(tmp_path):
    from dataflex_callbacks.recipes.compare import Budget, CompareSettings
    from dataflex_callbacks.recipes.compare.grid import GridOutcome
    from dataflex_callbacks.recipes.compare.report import render_report

    from .test_reach import grid_records

    settings = CompareSettings(
        strategies=["base", "fast"],
        seeds=[0, 1],
        budget=Budget.parse("completions:400"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
    )
    report = render_report(settings, GridOutcome(records=grid_records()))
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Compute to reach the target"
    assert "the headline" in report.split("## Compute to reach the target")[1].split("\n## ")[0]
    secondary = [s for s in sections if "seed-mean" in s]
    assert len(secondary) == 1 and secondary[0].startswith("## Secondary view (not the headline)")


def _figure_records(domains, strategies=("base", "fast"), seeds=(0, 1)):
    records = []
    for strategy in strategies:
        for seed in seeds:
            accuracy = {"overall": 0.5, **{d: 0.5 for d in domains}}
            share = 1.0 / len(domains)
            point = {"accuracy": accuracy, "sampled_pass_at_1": accuracy, "headline": 0.5}
            records.append(
                {
                    "strategy": strategy,
                    "seed": seed,
                    "before": accuracy,
                    "after": accuracy,
                    "headline": headline_block(0.5, 0.5),
                    "curve": [
                        {"step": 0, "completions": 0, "completion_tokens": 0, **point},
                        {"step": 2, "completions": 8, "completion_tokens": 32, **point},
                    ],
                    "proportions": [
                        {"step": step, "sampled": {d: share for d in domains}, "target": None} for step in (1, 2)
                    ],
                }
            )
    return records


def _capture_figures(monkeypatch):
    from matplotlib.figure import Figure

    drawn = {}
    real_savefig = Figure.savefig

    def savefig(figure, path, *args, **kwargs):
        drawn[str(path).rsplit("/", 1)[-1]] = figure
        return real_savefig(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return drawn


def test_more_than_ten_domains_get_distinct_colours(tmp_path, monkeypatch):
    from matplotlib.colors import to_hex

    from dataflex_callbacks.recipes.compare.figures import plot_proportions

    drawn = _capture_figures(monkeypatch)
    domains = [f"d{i:02d}" for i in range(13)]
    plot_proportions(str(tmp_path / "p.png"), _figure_records(domains), ["base", "fast"])
    lines = drawn["p.png"].axes[0].get_lines()
    assert len(lines) == 13 and len({to_hex(line.get_color()) for line in lines}) == 13


def test_the_accuracy_legend_does_not_cover_the_first_panel(tmp_path, monkeypatch):
    from dataflex_callbacks.recipes.compare.figures import plot_accuracy

    drawn = _capture_figures(monkeypatch)
    levels = [("the baseline's final accuracy on the same seed", {0: 0.5, 1: 0.5}), ("the target", 0.8)]
    plot_accuracy(str(tmp_path / "a.png"), _figure_records(["x", "y"]), ["base", "fast"], "base", levels=levels)
    figure = drawn["a.png"]
    figure.draw_without_rendering()
    legend = figure.legends[0]
    assert [t.get_text() for t in legend.get_texts()][:2] == ["base", "fast"]
    box = legend.get_window_extent()
    assert not any(box.overlaps(panel.get_window_extent()) for panel in figure.axes if panel.get_visible())
    assert (tmp_path / "a.png").stat().st_size > 5000


def test_the_report_states_compute_to_target_in_steps_and_the_cost_model_it_used(tmp_path):
    from dataflex_callbacks.recipes.compare import Budget, CompareSettings
    from dataflex_callbacks.recipes.compare.grid import GridOutcome
    from dataflex_callbacks.recipes.compare.report import render_report

    from .test_reach import unit_records

    records = unit_records()
    settings = CompareSettings(
        strategies=["base", "dyn"],
        seeds=[0],
        budget=Budget.parse("completions:1280"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
        cost_model="gen_token=1.0,train_token=0.3",
    )
    report = render_report(settings, GridOutcome(records=records, reused=[r["name"] for r in records]))
    headline = report.split("## Compute to reach the target", 1)[1].split("\n## ", 1)[0]
    assert "| completions | x baseline | optimizer steps | x baseline |" in headline
    assert "| `dyn` | 533 (interval n/a: needs >= 2 seeds) | 0.42 (interval n/a: needs >= 2 seeds) | 3 (" in headline
    # The second table: trained tokens, generation and update seconds, and the modelled cost.
    for label in ("trained tokens", "generation seconds", "update seconds", "modelled cost"):
        assert f"| {label} | x baseline |" in headline
    # base reaches 0.7 at its end: 1.0 x 6400 + 0.3 x 6400 = 8320; dyn at 2/3 of 4000 + 0.3 x 1280.
    base_row = next(line for line in headline.splitlines() if line.startswith("| `base` | 6400"))
    assert "| 8320 (interval n/a: needs >= 2 seeds) | 1 (reference) |" in base_row
    assert "- cost model: 1 per generated token, 0.3 per trained token" in report


# --------------------------------------------------------------------------- the headline (issue 39.4)


def _settings(tmp_path, strategies, seeds):
    from dataflex_callbacks.recipes.compare import Budget, CompareSettings

    return CompareSettings(
        strategies=list(strategies),
        seeds=list(seeds),
        budget=Budget.parse("completions:400"),
        output_dir=str(tmp_path / "cmp"),
        eval_points=1,
        progress=False,
    )


def test_reach_and_the_paired_difference_read_the_headline_not_greedy_accuracy():
    from dataflex_callbacks.recipes.compare.reach import reach_levels, strategy_reach
    from dataflex_callbacks.recipes.compare.report import paired_difference

    from .test_reach import grid_records, record

    # The same headline curves as grid_records, with greedy accuracy far off them (0.3 below for `fast`).
    offsets = {"base": 0.1, "fast": -0.3}
    shifted = [
        record(r["strategy"], r["seed"], [(p["completions"], p["headline"]) for p in r["curve"]], greedy_offset=d)
        for r in grid_records()
        for d in [offsets[r["strategy"]]]
    ]
    assert [r["after"]["overall"] for r in shifted] != [r["headline"]["after"] for r in shifted]
    assert reach_levels(shifted, "base", None) == reach_levels(grid_records(), "base", None)
    level = reach_levels(shifted, "base", None)[0][1]
    assert (
        strategy_reach(shifted, "fast", "base", level).per_seed
        == strategy_reach(grid_records(), "fast", "base", level).per_seed
    )
    paired = paired_difference(shifted, "fast", "base")
    assert paired["differences"] == pytest.approx([0.9 - 0.6, 0.9 - 0.8])  # headline; greedy would give -0.1, -0.3


def _headline_records(differences):
    """Per strategy, per seed: a run whose headline after training is the baseline's plus that seed's difference."""
    from .test_reach import record

    records = []
    for strategy, per_seed in differences.items():
        for seed, difference in enumerate(per_seed):
            records.append(record(strategy, seed, [(0, 0.5), (200, 0.5), (400, 0.6 + difference)]))
    return records


def test_the_report_prints_the_paired_standard_error_of_the_headline_difference_and_its_resolution(tmp_path):
    from dataflex_callbacks.recipes.compare import stats
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.grid import GridOutcome
    from dataflex_callbacks.recipes.compare.report import render_report

    steady, noisy = [0.010, 0.012, 0.011], [0.10, -0.10, 0.05]
    records = _headline_records({"base": [0.0, 0.0, 0.0], "steady": steady, "noisy": noisy})
    settings = _settings(tmp_path, ["base", "steady", "noisy"], [0, 1, 2])
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    report = render_report(settings, outcome)
    paired = report.split("## Paired difference to the baseline `base`", 1)[1].split("\n## ", 1)[0]
    assert "| strategy | difference per seed | mean [95% paired interval] | paired SE | resolves |" in paired
    for name, differences in (("steady", steady), ("noisy", noisy)):
        standard_error = stats.paired_standard_error(differences)
        row = next(line for line in paired.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [cell.strip() for cell in row.split("|")]
        assert cells[4] == f"{standard_error:.4f}" and cells[5] == f"±{stats.t_critical(2) * standard_error:.3f}"
    assert "A difference of 0.02 in the headline is resolved (t(n-1) x SE < 0.02) for: `steady`; not for: `noisy`." in (
        paired
    )
    console = [line for line in summary_lines(settings, outcome) if line.startswith("  steady") and "- base:" in line]
    assert len(console) == 1 and f"SE {stats.paired_standard_error(steady):.4f}" in console[0]


def test_the_results_csv_has_every_unit_and_the_headline_beside_greedy_accuracy(tmp_path):
    import csv

    from dataflex_callbacks.recipes.compare.results_csv import RUN_COLUMNS, write_results_csv

    from .test_reach import unit_records

    records = unit_records()
    for r in records:  # the run's totals, as `results._summarize` writes them
        final = r["curve"][-1]
        units = ("completion_tokens", "trained_tokens", "generation_seconds", "update_seconds")
        r.update({key: final[key] for key in units})
    write_results_csv(str(tmp_path / "results.csv"), records)
    with open(tmp_path / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for column in ("steps", "completions", "completion_tokens", "trained_tokens", "generation_seconds"):
        assert column in RUN_COLUMNS
    dyn = rows[1]
    assert (dyn["steps"], dyn["completions"], dyn["completion_tokens"], dyn["trained_tokens"]) == (
        "8",
        "1600",
        "8000",
        "2560",
    )
    assert (float(dyn["generation_seconds"]), float(dyn["update_seconds"])) == (15.0, 1.6)
    assert (dyn["headline_metric"], float(dyn["headline_before"]), float(dyn["headline_after"])) == (
        "sampled_pass_at_1",
        0.5,
        0.8,
    )
    assert float(dyn["headline_gain"]) == pytest.approx(0.3) and float(dyn["sampled_pass_at_1_after_a"]) == 0.8


def test_a_greedy_headline_is_said_in_the_report_the_console_and_the_figures(tmp_path, monkeypatch):
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.figures import plot_accuracy
    from dataflex_callbacks.recipes.compare.grid import GridOutcome
    from dataflex_callbacks.recipes.compare.report import render_report

    from .test_reach import grid_records, headline_block

    records = grid_records()
    for r in records:  # --eval-samples 0: no sampled pass@1, the headline is greedy accuracy
        r["headline"] = headline_block(r["headline"]["before"], r["headline"]["after"], metric="greedy_accuracy")
        r["sampled_pass_at_1"] = None
        for point in r["curve"]:
            point["sampled_pass_at_1"] = None
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    settings = _settings(tmp_path, ["base", "fast"], [0, 1])
    report = render_report(settings, outcome)
    warnings = [line for line in report.splitlines() if line.startswith("> **Warning:** the headline falls back")]
    assert len(warnings) == 1 and "held-out greedy accuracy (--eval-samples 0)" in warnings[0]
    assert "- headline: held-out greedy accuracy (--eval-samples 0) on every held-out prompt" in report
    assert any(line.startswith("warning: the headline falls back") for line in summary_lines(settings, outcome))
    drawn = _capture_figures(monkeypatch)
    plot_accuracy(str(tmp_path / "a.png"), records, ["base", "fast"], "base", axis="step")
    titles = [panel.get_title() for panel in drawn["a.png"].axes]
    assert titles == ["headline", "greedy accuracy: overall", "greedy accuracy: a"]
    assert drawn["a.png"].axes[0].get_xlabel() == "optimizer steps"


@pytest.mark.parametrize("seeds", [1, 2, 3, 4, 5])
def test_up_to_3_seeds_draw_each_seeds_curve_and_no_band_from_4_seeds_the_band(tmp_path, monkeypatch, seeds):
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_hex

    from dataflex_callbacks.recipes.compare.figures import SEED_CURVES_UP_TO, plot_accuracy

    drawn = _capture_figures(monkeypatch)
    records = _figure_records(["x"], seeds=tuple(range(seeds)))
    plot_accuracy(str(tmp_path / "a.png"), records, ["base", "fast"], "base", axis="step")
    for panel in drawn["a.png"].axes[:3]:
        lines = panel.get_lines()
        means = {line.get_label(): line for line in lines if line.get_label() in ("base", "fast")}
        seed_lines = [line for line in lines if line.get_label().startswith("_")]
        bands = [c for c in panel.collections if isinstance(c, PolyCollection)]
        assert set(means) == {"base", "fast"}
        if seeds > SEED_CURVES_UP_TO:  # from 4 seeds: a band per strategy, no seed curves
            assert len(bands) == 2 and seed_lines == []
            continue
        assert bands == []  # 2-3 seeds: the band would span most of the axis
        assert len(seed_lines) == (2 * seeds if seeds > 1 else 0)  # one seed's curve is its mean
        for strategy, mean in means.items():
            own = [line for line in seed_lines if line.get_label().startswith(f"_{strategy} seed ")]
            assert len(own) == (seeds if seeds > 1 else 0)
            assert {to_hex(line.get_color()) for line in own} <= {to_hex(mean.get_color())}  # the strategy's colour
            assert all(line.get_linewidth() < mean.get_linewidth() for line in own)  # thin
    band = "95% band" if seeds > SEED_CURVES_UP_TO else "thin: each seed"
    assert drawn["a.png"].axes[0].get_ylabel() == f"held-out (mean over seeds; {band})"
