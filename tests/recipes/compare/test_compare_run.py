"""A small real `dataflex compare` (2 strategies x 2 seeds, 3 steps): report files, matched seeds, resume."""

import csv
import json
import os
import re

import pytest

from dataflex_callbacks.recipes.cli import main
from dataflex_callbacks.recipes.compare import grid
from dataflex_callbacks.recipes.compare.results_csv import RUN_COLUMNS

ARGS = [
    "compare",
    "--strategies",
    "baseline,difffilter",
    "--num-seeds",
    "2",
    "--budget",
    "steps:3",
    "--eval-points",
    "1",
    "--no-progress",
    "--suite",
    "toy",
]
DOMAINS = ("code", "coin", "digit", "echo")
RUN_NAMES = ("baseline-seed0", "baseline-seed1", "difffilter-seed0", "difffilter-seed1")


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare") / "cmp"
    # Two jobs: the first invocation goes through the worker processes.
    assert main([*ARGS, "--output-dir", str(folder), "--jobs", "2"]) == 0
    return folder


def _rows(folder):
    with open(folder / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


def _without_times(record):
    """A result record without its wall times (the run's and its curve points', generation and update seconds
    included), which differ between computations."""
    times = ("wall_seconds", "generation_seconds", "update_seconds")
    curve = [{k: v for k, v in point.items() if k not in times} for point in record["curve"]]
    return {**{k: v for k, v in record.items() if k not in times}, "curve": curve}


def _result_times(folder):
    return {name: os.stat(folder / "runs" / name / "result.json").st_mtime_ns for name in RUN_NAMES}


def count_runs(monkeypatch):
    """Record the name of every run `dataflex compare` computes (in process, ``--jobs 1``)."""
    calls = []
    real = grid.execute_run

    def counting(settings, run, *args, **kwargs):
        calls.append(run.name)
        return real(settings, run, *args, **kwargs)

    monkeypatch.setattr(grid, "execute_run", counting)
    return calls


def test_all_report_files_with_the_expected_columns(compare_dir):
    for name in (
        "report.md",
        "results.csv",
        "compare.json",
        "figures/accuracy_vs_completions.png",
        "figures/accuracy_vs_steps.png",
        "figures/domain_proportions.png",
    ):
        assert (compare_dir / name).stat().st_size > 0, name
    columns, rows = _rows(compare_dir)
    per_domain = [f"accuracy_{when}_{d}" for d in DOMAINS for when in ("before", "after")]
    sampled = [f"sampled_pass_at_1_{when}_{d}" for d in ("overall", *DOMAINS) for when in ("before", "after")]
    reach = ["reach_baseline_final_completions", "reach_baseline_final_step", "reach_baseline_final_censored"]
    reach += [f"reach_baseline_final_{part}_x_baseline" for part in ("step_cost", "steps", "completions")]
    assert columns == [*RUN_COLUMNS, *per_domain, *sampled, *reach, "run_dir"]
    for column in ("steps", "completions", "completion_tokens", "trained_tokens", "generation_seconds"):
        assert column in columns and all(float(row[column]) > 0 for row in rows), column
    assert all(float(row["update_seconds"]) > 0 for row in rows)
    assert sorted((r["strategy"], r["seed"]) for r in rows) == [
        ("baseline", "0"),
        ("baseline", "1"),
        ("difffilter", "0"),
        ("difffilter", "1"),
    ]
    for row in rows:
        assert row["budget"] == "steps:3" and row["steps"] == "3"
        assert int(row["completions"]) == 3 * 8 * 8
        assert 0 < int(row["completion_tokens"]) <= 3 * 8 * 8 * 4
        assert 0.0 <= float(row["kept_frac"]) <= 1.0 and float(row["wall_seconds"]) > 0
        # The toy suite's headline: sampled pass@1 over every held-out prompt.
        assert row["headline_metric"] == "sampled_pass_at_1"
        assert float(row["headline_after"]) == float(row["sampled_pass_at_1_after_overall"])
    report = (compare_dir / "report.md").read_text()
    for text in (
        "Held-out accuracy after training",
        "Paired difference to the baseline `baseline`",
        "`difffilter`",
        "sign-flip",
        "Student-t",
        "## Method",
        "figures/accuracy_vs_completions.png",
        "figures/accuracy_vs_steps.png",
        "- headline: held-out sampled pass@1 (k=4, T=1) on every held-out prompt (200 prompts)",
        "| paired SE | resolves |",
    ):
        assert text in report, text
    assert "not significant" in report or "**significant**" in report


def test_runs_of_one_seed_start_from_the_same_weights_and_data(compare_dir):
    for seed in (0, 1):
        results = [
            json.loads((compare_dir / "runs" / f"{s}-seed{seed}" / "result.json").read_text())
            for s in ("baseline", "difffilter")
        ]
        assert results[0]["before"] == results[1]["before"]
        first_steps = [
            json.loads((compare_dir / "runs" / f"{s}-seed{seed}" / "metrics.jsonl").open().readline())
            for s in ("baseline", "difffilter")
        ]
        # Step 1 is generated before any update: same prompts, same completions, same rewards.
        for key in ("reward", "completions/mean_length", *(f"mix/actual/{d}" for d in DOMAINS)):
            assert first_steps[0][key] == first_steps[1][key], key
        assert [p["step"] for p in results[0]["curve"]] == [0, 1, 3]
        # Every evaluation point has the headline and, per domain, greedy accuracy and sampled pass@1.
        for result in results:
            for point in result["curve"]:
                assert set(point["accuracy"]) == set(point["sampled_pass_at_1"]) == {*DOMAINS, "overall"}
                assert point["headline"] == point["sampled_pass_at_1"]["overall"]
            assert result["curve"][-1]["headline"] == result["headline"]["after"]
            assert result["curve"][-1]["sampled_pass_at_1"] == result["sampled_pass_at_1"]["after"]


def test_resuming_a_finished_compare_recomputes_nothing(compare_dir, monkeypatch, capsys):
    before = _result_times(compare_dir)

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished run was recomputed")

    monkeypatch.setattr(grid, "execute_run", must_not_run)
    assert main([*ARGS, "--output-dir", str(compare_dir), "--jobs", "1"]) == 0
    assert "0 runs computed, 4 reused" in capsys.readouterr().out
    assert _result_times(compare_dir) == before
    assert _rows(compare_dir)[1]


def test_other_settings_on_the_same_folder_are_refused(compare_dir, capsys):
    changed = [a if a != "steps:3" else "steps:4" for a in ARGS]
    assert main([*changed, "--output-dir", str(compare_dir)]) == 2
    assert "other settings" in capsys.readouterr().err


def test_an_interrupted_compare_recomputes_only_the_missing_run(compare_dir, monkeypatch):
    before = _result_times(compare_dir)
    result_path = compare_dir / "runs" / "difffilter-seed1" / "result.json"
    previous = json.loads(result_path.read_text())
    os.remove(result_path)
    calls = count_runs(monkeypatch)
    assert main([*ARGS, "--output-dir", str(compare_dir), "--jobs", "1"]) == 0
    assert calls == ["difffilter-seed1"]
    after = _result_times(compare_dir)
    assert {k: v for k, v in after.items() if k != "difffilter-seed1"} == {
        k: v for k, v in before.items() if k != "difffilter-seed1"
    }
    assert not [p for p in (compare_dir / "runs" / "difffilter-seed1").iterdir() if p.name.endswith(".tmp")]
    # First computed in a worker process, now in this one: the same numbers.
    recomputed = json.loads(result_path.read_text())
    assert _without_times(recomputed) == _without_times(previous)


@pytest.mark.parametrize(
    "bad",
    [
        ["--budget", "tokens:5"],
        ["--num-seeds", "0"],
        ["--seeds", "0", "--num-seeds", "1"],
        ["--seeds", "1.5"],
        ["--strategies", "nope"],
        ["--strategies", "baseline,topk", "--baseline", "ar"],
    ],
)
def test_bad_arguments_fail_before_any_run(tmp_path, capsys, bad):
    assert main(["compare", *bad, "--output-dir", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "dataflex: error:" in capsys.readouterr().err
    assert not (tmp_path / "c" / "runs").exists()


def test_a_truncated_compare_json_is_a_one_line_error_naming_it(compare_dir, capsys):
    manifest = compare_dir / "compare.json"
    text = manifest.read_text()
    try:
        manifest.write_text(text[: len(text) // 2])
        assert main([*ARGS, "--output-dir", str(compare_dir), "--jobs", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "compare.json" in err and "cannot be read" in err and "--overwrite" in err
    finally:
        manifest.write_text(text)


@pytest.mark.parametrize("damage", ["missing key", "truncated"])
def test_a_damaged_result_is_recomputed_with_a_warning(compare_dir, monkeypatch, capsys, damage):
    result_path = compare_dir / "runs" / "baseline-seed1" / "result.json"
    previous = json.loads(result_path.read_text())
    if damage == "missing key":
        result_path.write_text(json.dumps({k: v for k, v in previous.items() if k != "after"}))
    else:
        result_path.write_text(result_path.read_text()[:100])
    calls = count_runs(monkeypatch)
    assert main([*ARGS, "--output-dir", str(compare_dir), "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert calls == ["baseline-seed1"]
    assert "dataflex: warning:" in err and "baseline-seed1" in err and "recomputing" in err
    recomputed = json.loads(result_path.read_text())
    assert _without_times(recomputed) == _without_times(previous)


def _small_settings(folder, budget="steps:3"):
    from dataflex_callbacks.recipes.compare import Budget, CompareSettings

    return CompareSettings(
        strategies=["baseline", "difffilter"],
        seeds=[0, 1],
        budget=Budget.parse(budget),
        output_dir=str(folder),
        eval_points=1,
        progress=False,
    )


def test_a_manifest_without_finished_runs_does_not_block_the_corrected_command(compare_dir, tmp_path):
    # A start that failed after writing compare.json (e.g. in its first run) leaves no finished run:
    # the corrected command with other settings takes the folder over.
    folder = tmp_path / "cmp"
    old = _small_settings(folder, "steps:9")
    folder.mkdir()
    grid.write_json_atomic(str(folder / "compare.json"), {"shared": old.shared()})
    new = _small_settings(folder)
    heard = []
    grid._prepare_folder(new, overwrite=False, on_warning=heard.append)
    assert json.loads((folder / "compare.json").read_text())["shared"]["budget"] == "steps:3"
    assert heard and "no run finished" in heard[0]
    # With a finished run in the folder, other settings are refused: that run would be lost.
    (folder / "runs" / "baseline-seed0").mkdir(parents=True)
    (folder / "runs" / "baseline-seed0" / "result.json").write_text(
        (compare_dir / "runs" / "baseline-seed0" / "result.json").read_text()
    )
    with pytest.raises(grid.CompareInputError, match="other settings"):
        grid._prepare_folder(old, overwrite=False)


def test_one_seed_prints_no_nan_interval(compare_dir):
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.grid import GridOutcome
    from dataflex_callbacks.recipes.compare.report import render_report

    settings = _small_settings(compare_dir)
    settings.seeds = [0]
    records = [
        json.loads((compare_dir / "runs" / f"{s}-seed0" / "result.json").read_text())
        for s in ("baseline", "difffilter")
    ]
    outcome = GridOutcome(records=records, reused=[r["name"] for r in records])
    lines = summary_lines(settings, outcome)
    accuracy = [line for line in lines if " - baseline:" in line]
    assert len(accuracy) == 1 and "n/a: needs >= 2 seeds" in accuracy[0]
    assert not re.search(r"\bnan\b", "\n".join(lines))
    report = render_report(settings, outcome)
    assert not re.search(r"\bnan\b", report, flags=re.IGNORECASE)  # "n/a", never a NaN bound
    assert "needs >= 2 seeds" in report


@pytest.mark.parametrize(
    "flags, seeds",
    [
        ([], [0, 1, 2]),
        (["--seeds", "11"], [11]),
        (["--seeds", "11,"], [11]),
        (["--seeds", "0,5,7"], [0, 5, 7]),
        (["--seeds", "11-13"], [11, 12, 13]),
        (["--num-seeds", "4"], [0, 1, 2, 3]),
    ],
)
def test_seeds_are_seeds_and_num_seeds_is_a_count(flags, seeds):
    from dataflex_callbacks.recipes.cli import build_parser
    from dataflex_callbacks.recipes.compare.cli import settings_from_args

    args = build_parser().parse_args(["compare", "--suite", "toy", *flags])
    assert settings_from_args(args, []).seeds == seeds


@pytest.mark.parametrize("seeds", [2.5, True, None, {"a": 1}])
def test_compare_refuses_a_seeds_value_that_is_no_seed_form_naming_it(tmp_path, seeds):
    from dataflex_callbacks.recipes.compare import CompareInputError, compare

    with pytest.raises(CompareInputError) as caught:
        compare(["baseline"], seeds=seeds, suite="toy", output_dir=str(tmp_path / "c"))
    assert f"seeds {seeds!r}" in str(caught.value) and "a count (3: seeds 0, 1, 2)" in str(caught.value)
    assert "(11-13)" in str(caught.value) and not (tmp_path / "c").exists()


def test_compare_takes_a_count_a_list_or_the_cli_s_text_as_seeds():
    from dataflex_callbacks.recipes.compare.grid import parse_seeds

    assert parse_seeds(3, "seeds") == [0, 1, 2] and parse_seeds((4, 9), "seeds") == [4, 9]
    assert parse_seeds("11", "seeds") == [11] and parse_seeds("2-3", "seeds") == [2, 3]


def test_the_first_lines_name_the_seeds_then_the_model_and_its_rate(compare_dir, monkeypatch, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished run was recomputed")

    monkeypatch.setattr(grid, "execute_run", must_not_run)
    shown = [a for a in ARGS if a != "--no-progress"]
    assert main([*shown, "--output-dir", str(compare_dir), "--jobs", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[:3]
    assert first[0] == "dataflex compare: 2 strategies (baseline, difffilter) x 2 seed(s) (0, 1) = 4 runs"
    assert first[1].startswith("dataflex compare: data: the built-in toy suite")
    assert first[2].startswith(
        "dataflex compare: model: the toy suite's random-initialised tiny model (--suite toy); learning rate 0.003"
    )
