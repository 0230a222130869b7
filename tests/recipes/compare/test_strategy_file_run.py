"""A strategy file is shown by its `name:` (its file name without extension when it names none) everywhere a user reads
a comparison: the console, report.md, results.csv, the run folders; and `dataflex compare`'s progress bar counts the
budget's unit, which every run spends whatever a step generates, so it ends at its total and never runs ahead.

One real tiny comparison on the testbed (4 prompts x 4 completions, completions:100, no evaluations along the way):
plain GRPO and a screen part without refill (fewer completions a step than a batch), given as a YAML file whose
name differs from its file name."""

import contextlib
import csv
import io
import json

import pytest
import tqdm.auto

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


def test_the_ledger_reports_progress_in_the_budget_s_unit_capped_at_the_budget():
    from types import SimpleNamespace

    from dataflex_callbacks.recipes.compare.budget import GenerationLedger, budget_callback

    reported = []
    ledger = GenerationLedger(Budget.parse(f"completions:{BUDGET}"))
    callback = budget_callback(ledger, on_step=reported.append)
    args = SimpleNamespace(
        steps_per_generation=1, num_iterations=1, generation_batch_size=16, gradient_accumulation_steps=1
    )
    control = SimpleNamespace(should_log=True, should_training_stop=False)
    step = 0
    while not control.should_training_stop:  # a step that generated 12 of a batch's 16 completions, logged
        step += 1
        callback.on_step_end(args, SimpleNamespace(global_step=step), control)
        callback.on_log(
            args, SimpleNamespace(global_step=step), control, logs={"loss": 0.0, "dataflex/alloc/step_generated": 12}
        )
    assert ledger.completions == 108 and step == 9  # more steps than the 7 a full batch needs
    assert reported == [12, 24, 36, 48, 60, 72, 84, 96, BUDGET]


class _RecordedBar(tqdm.auto.tqdm):
    """tqdm, recording the count of `dataflex compare`'s bar after every update (other bars, model loading's, are
    left alone)."""

    counts: list[int] = []
    totals: list[int] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded = self.desc == "dataflex compare"
        if self.recorded:
            _RecordedBar.totals.append(self.total)
            _RecordedBar.counts.append(self.n)

    def update(self, n=1):
        shown = super().update(n)
        if self.recorded:
            _RecordedBar.counts.append(self.n)
        return shown


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory):
    """The comparison's folder, its console (stdout and stderr) and the progress bar's counts."""
    from dataflex_callbacks.recipes.cli import main

    folder = tmp_path_factory.mktemp("labels")
    strategy = folder / "config_v2.yaml"
    strategy.write_text(NAMED)
    args = ["compare", "--strategies", f"none,{strategy}", "--budget", f"completions:{BUDGET}", "--seeds", "0"]
    args += ["--jobs", "1", "--prompts-per-step", "4", "--num-generations", "4", "--eval-points", "0"]
    args += ["--eval-samples", "0", "--output-dir", str(folder / "cmp")]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setattr(tqdm.auto, "tqdm", _RecordedBar)
        code = main(args)
    assert code == 0, err.getvalue()[-2000:]
    return folder / "cmp", out.getvalue() + err.getvalue(), list(_RecordedBar.counts), list(_RecordedBar.totals)


@pytest.mark.slow
def test_the_console_report_and_results_csv_name_the_file_by_its_name(compare_run):
    folder, console, _, _ = compare_run
    report = "\n".join(line for line in (folder / "report.md").open() if not line.startswith("- command:"))
    with open(folder / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["strategy"] for row in rows} == {"none", "narrow_screen"}
    assert "narrow_screen" in report and "narrow_screen" in console
    for shown in (report, console, (folder / "results.csv").read_text()):
        assert "config_v2" not in shown
    assert console.splitlines()[0] == "dataflex compare: 2 strategies (none, narrow_screen) x 1 seed(s) (0) = 2 runs"
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["narrow_screen-seed0", "none-seed0"]


@pytest.mark.slow
def test_the_progress_bar_counts_completions_and_ends_at_its_total(compare_run):
    folder, _, counts, totals = compare_run
    assert totals == [2 * BUDGET]
    metrics = [json.loads(line) for line in (folder / "runs" / "narrow_screen-seed0" / "metrics.jsonl").open()]
    generated = [int(m["dataflex/alloc/step_generated"]) for m in metrics]
    assert len(generated) > -(-BUDGET // 16)  # fewer completions a step than a batch: more steps than 7
    spent = [min(sum(generated[: k + 1]), BUDGET) for k in range(len(generated))]
    # Plain GRPO's run fills the first half; the screen run's steps then add what each generated, up to the budget.
    assert counts[counts.index(BUDGET) :] == [BUDGET + s for s in [0, *spent]]
    assert counts == sorted(counts) and counts[-1] == totals[0]
