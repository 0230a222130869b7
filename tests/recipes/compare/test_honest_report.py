"""The report states the figures the runs used (read from their results), not the options requested."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402

# Tiny: 2 strategies x 1 seed x 1 step of 2 prompts x 2 completions.
TINY = [
    "--strategies",
    "baseline,none",
    "--num-seeds",
    "1",
    "--budget",
    "steps:1",
    "--eval-points",
    "0",
    "--no-progress",
    "--prompts-per-step",
    "2",
    "--num-generations",
    "2",
    "--jobs",
    "1",
]


def test_a_40_row_dataset_reports_the_held_out_rows_config_json_has(tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(40)))
    # --n-test 50 asks for 50 held-out prompts; 40 rows give a split of 8.
    assert (
        main(["compare", *TINY, "--dataset", str(data), "--n-test", "50", "--output-dir", str(tmp_path / "out")]) == 0
    )
    config = json.loads((tmp_path / "out" / "runs" / "baseline-seed0" / "config.json").read_text())
    n_test = config["n_test_rows"]
    assert n_test == 8
    report = (tmp_path / "out" / "report.md").read_text()
    assert "50 prompts" not in report
    assert f"- held-out set: {n_test} prompts (" in report
    out = capsys.readouterr().out
    assert f"held-out set: {n_test} prompts" in out
    # One seed (whose held-out figures may all be equal): the verdict that ends the report and the console claims
    # nothing; test_verdict.py has its wording for each case.
    assert [line for line in report.splitlines() if line.startswith("## ")][-1] == "## Verdict"
    verdict = report.split("## Verdict\n", 1)[1].strip().splitlines()
    assert verdict[0].startswith(("- With 1 seed paired with the baseline no interval can be given", "- No verdict: "))
    assert not any(line.startswith("- `none` ") for line in verdict)
    console = out.splitlines()
    assert console[console.index("verdict:") + 1 :] == [f"  {line.replace('`', '')}" for line in verdict]


def _record(strategy, seed, accuracy):
    from .test_reach import headline_block

    point = {"overall": accuracy, "a": accuracy}
    return {
        "strategy": strategy,
        "seed": seed,
        "before": point,
        "after": point,
        "sampled_pass_at_1": {"k": 4, "temperature": 1.0, "before": point, "after": point},
        "headline": headline_block(accuracy, accuracy),
        "curve": [{"step": 0, "completions": 0, "accuracy": point, "sampled_pass_at_1": point, "headline": accuracy}],
    }


def test_all_equal_accuracies_print_a_warning_not_a_difference():
    from types import SimpleNamespace

    from dataflex_callbacks.recipes.compare.cli import summary_lines

    settings = SimpleNamespace(
        strategies=["baseline", "none"],
        baseline="baseline",
        target=None,
        cost_model=None,
        jobs=1,
        train=None,  # TRL runs dataflex builds, not a training function's
        base=SimpleNamespace(dataset=None, eval_dataset=None, max_completion_length=4, suite="toy", learning_rate=1e-3),
    )
    flat = SimpleNamespace(records=[_record(s, seed, 0.0) for s in ("baseline", "none") for seed in (0, 1, 2)])
    lines = summary_lines(settings, flat)
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert len(warnings) == 1 and "all held-out accuracies are equal" in lines[0]
    assert "cannot separate strategies" in lines[0] and "--max-completion-length" in lines[0]
    assert "not significant" not in " ".join(lines)
    # The console still ends with the verdict, which gives none.
    assert lines[1] == "verdict:" and lines[2].startswith("  - No verdict: all held-out accuracies are equal")
    varied = SimpleNamespace(records=[_record(s, seed, 0.1 * seed) for s in ("baseline", "none") for seed in (0, 1, 2)])
    assert "all held-out accuracies are equal" not in " ".join(summary_lines(settings, varied))


def test_an_all_zero_grid_is_flagged_in_the_report_and_on_the_console(tmp_path, monkeypatch, capsys):
    import sys

    (tmp_path / "zero_reward_t30.py").write_text(
        "def zero(prompts, completions, **columns):\n    return [0.0] * len(completions)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    try:
        assert (
            main(
                [
                    "compare",
                    *TINY,
                    "--suite",
                    "toy",
                    "--n-train",
                    "2",
                    "--n-test",
                    "1",
                    "--domains",
                    "digit",
                    "--reward",
                    "zero_reward_t30:zero",
                    "--output-dir",
                    str(tmp_path / "out"),
                ]
            )
            == 0
        )
    finally:
        sys.modules.pop("zero_reward_t30", None)
    out = capsys.readouterr().out
    assert "all held-out accuracies are equal (0.000" in out and "not significant" not in out
    report = (tmp_path / "out" / "report.md").read_text()
    assert "> **Warning:** all held-out accuracies are equal (0.000" in report
    assert "not significant" not in report and "Completions to reach" not in report
    assert "- No verdict: all held-out accuracies are equal" in report.split("## Verdict\n", 1)[1]


def test_prompts_plus_completions_past_the_models_positions_are_refused_before_training(tmp_path, capsys):
    from dataflex_callbacks.errors import DataFlexError
    from dataflex_callbacks.recipes.compare import CompareInputError

    assert issubclass(CompareInputError, DataFlexError)
    data = tmp_path / "long.jsonl"
    prompt = "1" * 40 + "+1="  # 43 characters: 43 tokens for the built-in tiny model (64 positions)
    data.write_text("".join(f'{{"prompt": "{prompt}", "answer": "{i}"}}\n' for i in range(10)))
    out = tmp_path / "out"
    assert (
        main(["compare", *TINY, "--dataset", str(data), "--max-completion-length", "32", "--output-dir", str(out)]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "64" in err and "max_position_embeddings" in err
    assert "up to 32 tokens" in err and not out.exists()


def test_the_context_check_reads_the_users_own_model_folder(tmp_path, capsys):
    from dataflex_callbacks.recipes.tiny_model import save_tiny

    model = save_tiny(tmp_path / "my_model", max_position_embeddings=40)  # the user's folder: 40 positions
    capsys.readouterr()  # saving prints a progress bar
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f'{{"prompt": "{"1" * 20}+{i}=", "answer": "{i}"}}\n' for i in range(10)))
    out = tmp_path / "out"
    assert (
        main(
            [
                "compare",
                *TINY,
                "--model",
                model,
                "--dataset",
                str(data),
                "--max-completion-length",
                "24",
                "--output-dir",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "is 23 tokens and completions are up to 24 tokens: 47 positions, but the model holds 40" in err
    assert not out.exists()


def test_the_users_reward_model_folder_and_jsonl_give_an_honest_report(tmp_path, capsys, monkeypatch):
    """The acceptance path of `dataflex compare` on a user's own work: sizes as config.json has them, the headline
    first, and completions cut at --max-completion-length flagged in the report and on the console."""
    import sys

    from dataflex_callbacks.recipes.tiny_model import save_tiny

    model = save_tiny(tmp_path / "my_model")
    (tmp_path / "my_rewards_t30.py").write_text(
        # An untrained tiny model writes the same completion for every prompt: this reward reads the prompt, so
        # held-out accuracy differs between the seeds' held-out splits and the report has figures to show.
        "def even(prompts, completions, answer, **columns):\n"
        "    return [float(int(p.split('+')[0]) % 5 == 0) for p in prompts]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(40)))
    capsys.readouterr()
    try:
        assert (
            main(
                [
                    "compare",
                    *TINY,
                    "--num-seeds",
                    "2",
                    "--model",
                    model,
                    "--dataset",
                    str(data),
                    "--n-test",
                    "50",
                    "--reward",
                    "my_rewards_t30:even",
                    "--reward-threshold",
                    "0.5",
                    "--target",
                    "0.5",
                    "--max-completion-length",
                    "4",
                    "--output-dir",
                    str(tmp_path / "out"),
                ]
            )
            == 0
        )
    finally:
        sys.modules.pop("my_rewards_t30", None)
    out = capsys.readouterr().out
    config = json.loads((tmp_path / "out" / "runs" / "none-seed1" / "config.json").read_text())
    report = (tmp_path / "out" / "report.md").read_text()
    assert config["n_test_rows"] == 8 and "- held-out set: 8 prompts" in report and "held-out set: 8 prompts" in out
    assert "- seeds: 0, 1 " in report and "`my_rewards_t30:even`" in report
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Compute to reach the target" and "### The target: 0.500" in report
    assert "all held-out accuracies are equal" not in report
    headline = report.split("## Compute to reach the target")[1].split("\n## ")[0]
    assert "| `none` |" in headline and "x baseline" in headline
    cut = "runs had more than 50% of their training completions cut at --max-completion-length 4 tokens"
    assert f"> **Warning:** 4 of 4 {cut}" in report and f"warning: 4 of 4 {cut}" in out
    # Two seeds: the report and the console end with the verdict, stated per its rule of evidence.
    assert sections[-1] == "## Verdict" and "- Certainty: 2 seeds" in report.split("## Verdict\n", 1)[1]
    console = out.splitlines()
    assert any(line.startswith("  - Certainty: 2 seeds") for line in console[console.index("verdict:") :])
    assert all(line.startswith("  - ") for line in console[console.index("verdict:") + 1 :])
