"""The report states the figures the runs used (read from their results), not the options requested."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402

# Tiny: 2 strategies x 1 seed x 1 step of 2 prompts x 2 completions.
TINY = ["--strategies", "baseline,none", "--seeds", "1", "--budget", "steps:1", "--eval-points", "0",
        "--no-progress", "--prompts-per-step", "2", "--num-generations", "2", "--jobs", "1"]


def test_a_40_row_dataset_reports_the_held_out_rows_config_json_has(tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(40)))
    # --n-test 50 asks for 50 held-out prompts; 40 rows give a split of 8.
    assert main(["compare", *TINY, "--dataset", str(data), "--n-test", "50", "--output-dir", str(tmp_path / "out")]) == 0
    config = json.loads((tmp_path / "out" / "runs" / "baseline-seed0" / "config.json").read_text())
    n_test = config["n_test_rows"]
    assert n_test == 8
    report = (tmp_path / "out" / "report.md").read_text()
    assert "50 prompts" not in report
    assert f"- held-out set: {n_test} prompts (" in report
    assert f"held-out set: {n_test} prompts" in capsys.readouterr().out
