"""A strategy file is shown by its `name:` (its file name without extension when it names none) everywhere a user reads
a comparison: the console, report.md, results.csv, the run folders.

One real tiny comparison on the testbed (4 prompts x 4 completions, completions:100, no evaluations along the way):
plain GRPO and a screen part without refill (fewer completions a step than a batch), given as a YAML file whose
name differs from its file name."""

import contextlib
import csv
import io

import pytest

from dataflex_callbacks.recipes.compare import Budget, CompareSettings
from dataflex_callbacks.recipes.compare.grid import CompareInputError, GridOutcome

BUDGET = 100
NAMED = "name: narrow_screen\nallocation: {name: screen, params: {refill: false}}\n"


def _settings(tmp_path, strategies):
    return CompareSettings(
        strategies=strategies, seeds=[0], budget=Budget.parse("steps:3"), output_dir=str(tmp_path), progress=False
    )


def test_a_strategy_file_is_labelled_by_its_name_or_else_its_file_name(tmp_path):
    named, unnamed = tmp_path / "config_v2.yaml", tmp_path / "plain_screen.yaml"
    named.write_text(NAMED)
    unnamed.write_text("allocation: {name: screen, params: {}}\n")
    settings = _settings(tmp_path / "cmp", ["none", str(named), str(unnamed), "baseline+difffilter"])
    assert list(settings.labels().values()) == ["none", "narrow_screen", "plain_screen", "baseline+difffilter"]
    assert [run.name for run in settings.grid()] == [
        "none-seed0",
        "narrow_screen-seed0",
        "plain_screen-seed0",
        "baseline+difffilter-seed0",
    ]
    shown = settings.as_read()
    assert shown.strategies == ["none", "narrow_screen", "plain_screen", "baseline+difffilter"]
    assert shown.baseline == "none" and settings.strategies[1] == str(named)  # the specs still run
    records = [{"strategy": str(named), "seed": 0}, {"strategy": "none", "seed": 0}]
    assert [r["strategy"] for r in GridOutcome(records=records).as_read(settings).records] == ["narrow_screen", "none"]


def test_two_strategies_of_one_name_are_refused_naming_both(tmp_path):
    twin = tmp_path / "other.yaml"
    twin.write_text("name: difffilter\nallocation: {name: screen, params: {}}\n")
    with pytest.raises(CompareInputError, match=r"difffilter and .*other\.yaml are both named 'difffilter'.*name:"):
        _settings(tmp_path / "cmp", ["difffilter", str(twin)])


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory):
    """The comparison's folder and its console (stdout and stderr)."""
    from dataflex_callbacks.recipes.cli import main

    folder = tmp_path_factory.mktemp("labels")
    strategy = folder / "config_v2.yaml"
    strategy.write_text(NAMED)
    args = ["compare", "--strategies", f"none,{strategy}", "--budget", f"completions:{BUDGET}", "--seeds", "0"]
    args += ["--jobs", "1", "--prompts-per-step", "4", "--num-generations", "4", "--eval-points", "0"]
    args += ["--eval-samples", "0", "--output-dir", str(folder / "cmp")]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    assert code == 0, err.getvalue()[-2000:]
    return folder / "cmp", out.getvalue() + err.getvalue()


@pytest.mark.slow
def test_the_console_report_and_results_csv_name_the_file_by_its_name(compare_run):
    folder, console = compare_run
    report = "\n".join(line for line in (folder / "report.md").open() if not line.startswith("- command:"))
    with open(folder / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["strategy"] for row in rows} == {"none", "narrow_screen"}
    assert "narrow_screen" in report and "narrow_screen" in console
    for shown in (report, console, (folder / "results.csv").read_text()):
        assert "config_v2" not in shown
    assert console.splitlines()[0] == "dataflex compare: 2 strategies (none, narrow_screen) x 1 seed(s) (0) = 2 runs"
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["narrow_screen-seed0", "none-seed0"]
