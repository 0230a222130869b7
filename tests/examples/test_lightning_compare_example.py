"""examples/lightning_compare.py: a Lightning GRPO module compared through `compare(..., train=train)`.

The acceptance of issue 48: baseline against diffband, 2 seeds, a completions budget, on the testbed's shipped
model. The report has paired differences; the completions the comparison counted equal those the module itself
generated (its own counter, written to ``generated.json``); ``dataflex compare --train
examples.lightning_compare:train`` (in 2 worker processes) gives the Python call's results.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("lightning")

REPO = Path(__file__).resolve().parents[2]
BUDGET = "completions:48"  # 3 steps of 4 prompts x 4 answers


def _rows(folder: Path) -> list[dict]:
    with open(folder / "results.csv") as handle:
        return [
            {k: v for k, v in row.items() if k not in ("wall_seconds", "run_dir")} for row in csv.DictReader(handle)
        ]


@pytest.fixture(scope="module")
def python_comparison(tmp_path_factory):
    """The example's comparison from Python, run from the repository root (``examples.lightning_compare``)."""
    from dataflex_callbacks.recipes.compare import compare

    folder = tmp_path_factory.mktemp("lightning_compare") / "py"
    here = os.getcwd()
    os.chdir(REPO)
    try:
        results = compare(
            ["baseline", "diffband"],
            seeds=2,
            budget=BUDGET,
            train="examples.lightning_compare:train",
            output_dir=str(folder),
            progress=False,
        )
    finally:
        os.chdir(here)
    return results, folder


def test_the_report_pairs_the_runs_and_counts_what_the_module_generated(python_comparison):
    results, folder = python_comparison
    assert len(results.runs) == 4
    for row in results.runs:
        own = json.loads((folder / "runs" / f"{row['strategy']}-seed{row['seed']}" / "generated.json").read_text())
        assert row["completions"] == own["completions"] == 48
        assert row["steps"] == own["steps"] == 3
        assert row["headline_metric"] == "logged_accuracy"
    paired = results.differences["diffband"]
    assert paired["seeds"] == [0, 1] and len(paired["differences"]) == 2
    report = (folder / "report.md").read_text()
    assert "## Paired difference to the baseline `baseline`" in report
    assert "examples.lightning_compare:train" in report
    assert (folder / "figures").is_dir()


def test_the_command_line_gives_the_python_results(python_comparison, tmp_path, monkeypatch):
    from dataflex_callbacks.recipes.cli import main

    _, folder = python_comparison
    monkeypatch.chdir(REPO)
    args = ["compare", "--train", "examples.lightning_compare:train", "--strategies", "baseline,diffband"]
    args += ["--num-seeds", "2", "--budget", BUDGET, "--jobs", "2", "--no-progress"]
    assert main([*args, "--output-dir", str(tmp_path / "cli")]) == 0
    assert _rows(tmp_path / "cli") == _rows(folder)


def test_gradient_accumulation_counts_every_generated_batch(tmp_path, monkeypatch):
    """Two generated batches per optimizer step (Lightning's ``accumulate_grad_batches=2``): the strategy decides on
    both, so the completions counted equal those the module generated, and the steps its optimizer steps."""
    import functools

    from dataflex_callbacks.recipes.compare import compare

    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    from examples.lightning_compare import train

    results = compare(
        ["diffband"],
        seeds=[1],
        budget="completions:64",  # 4 batches of 4 prompts x 4 answers: 2 optimizer steps
        train=functools.partial(train, accumulate_grad_batches=2),
        output_dir=str(tmp_path / "cmp"),
        progress=False,
    )
    (row,) = results.runs
    own = json.loads((tmp_path / "cmp" / "runs" / "diffband-seed1" / "generated.json").read_text())
    assert row["completions"] == own["completions"] == 64
    assert row["steps"] == own["steps"] == 2
