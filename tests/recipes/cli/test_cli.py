"""The `dataflex` command: a short real run, list/validate, and bad-input exit codes."""

import dataclasses
import json
import os

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402

SHORT = ["--steps", "3", "--no-progress", "--prompts-per-step", "4", "--num-generations", "4", "--n-test", "20"]


def _run(args):
    return main(["run", *SHORT, *args])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "demo"
    assert _run(["--output-dir", str(out)]) == 0
    return out


@pytest.mark.slow
def test_run_writes_the_run_folder(finished_run):
    assert sorted(os.listdir(finished_run)) == ["config.json", "eval.json", "metrics.jsonl", "plot.png"]
    config = json.loads((finished_run / "config.json").read_text())
    assert config["options"]["steps"] == 3 and config["strategy"] is not None
    metrics = [json.loads(line) for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for record in metrics:
        assert 0.0 <= record["kept_frac"] <= 1.0 and "loss" in record
        assert abs(sum(record[f"mix/actual/{d}"] for d in config["domains"]) - 1.0) < 1e-6
    evaluation = json.loads((finished_run / "eval.json").read_text())
    assert set(evaluation) == {"before", "after", "sampled_pass_at_1", "headline"}
    from dataflex_callbacks.recipes.testbed import HEADLINE_LEVELS, TRAIN_ROWS

    assert set(evaluation["before"]) == {*TRAIN_ROWS, "overall"}  # the default suite: the levels of the testbed's mix
    sampled = evaluation["sampled_pass_at_1"]  # beside the greedy figures: k samples per prompt at the training T
    assert sampled["k"] == 4 and sampled["temperature"] == config["options"]["temperature"] == 1.0
    for when in ("before", "after"):
        assert set(sampled[when]) == {*TRAIN_ROWS, "overall"} and all(0.0 <= v <= 1.0 for v in sampled[when].values())
    # The headline: sampled pass@1 over the held-out prompts of the headline levels (each prompt weighs the same).
    headline = evaluation["headline"]
    rows = config["n_test_rows_per_domain"]
    assert (headline["metric"], headline["k"], headline["levels"]) == ("sampled_pass_at_1", 4, list(HEADLINE_LEVELS))
    assert headline["rows"] == sum(rows[level] for level in HEADLINE_LEVELS)
    for when in ("before", "after"):
        pooled = sum(rows[level] * sampled[when][level] for level in HEADLINE_LEVELS) / headline["rows"]
        assert headline[when] == pytest.approx(pooled, abs=1e-12)
        assert headline[when] != pytest.approx(sampled[when]["overall"])  # the headline levels, not every level


@pytest.mark.slow
def test_same_seed_same_metrics(finished_run, tmp_path):
    assert _run(["--output-dir", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "metrics.jsonl").read_text() == (finished_run / "metrics.jsonl").read_text()
    assert (tmp_path / "again" / "eval.json").read_text() == (finished_run / "eval.json").read_text()


@pytest.mark.slow
def test_existing_run_needs_overwrite_and_zero_samples_fall_back_to_a_greedy_headline_with_a_warning(
    finished_run, tmp_path, capsys
):
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(finished_run, target)
    before = sorted(os.listdir(target))
    assert _run(["--output-dir", str(target)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(os.listdir(target)) == before
    capsys.readouterr()
    assert _run(["--output-dir", str(target), "--overwrite", "--strategy", "none", "--eval-samples", "0"]) == 0
    assert json.loads((target / "config.json").read_text())["strategy"] is None
    evaluation = json.loads((target / "eval.json").read_text())
    assert set(evaluation) == {"before", "after", "headline"}  # 0 samples: greedy only
    from dataflex_callbacks.recipes.testbed import HEADLINE_LEVELS

    rows = json.loads((target / "config.json").read_text())["n_test_rows_per_domain"]
    headline = evaluation["headline"]
    assert headline["metric"] == "greedy_accuracy" and headline["levels"] == list(HEADLINE_LEVELS)
    pooled = sum(rows[level] * evaluation["after"][level] for level in HEADLINE_LEVELS) / headline["rows"]
    assert headline["after"] == pytest.approx(pooled, abs=1e-12)
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("dataflex run: warning:")]
    assert len(warnings) == 1 and "the headline falls back to held-out greedy accuracy" in warnings[0]
    assert "headline: held-out greedy accuracy (--eval-samples 0) on " in captured.out


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["dapo", "dapo+skip"])
def test_run_with_dynamic_sampling_trains_full_batches_of_signal_groups(tmp_path, preset):
    out = tmp_path / "dapo"
    assert _run(["--output-dir", str(out), "--strategy", preset]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for record in metrics:
        assert 1 <= record["dataflex/dynamic/rounds"] <= 4 or record["dataflex/dynamic/carried"] > 0
        assert record["dataflex/dynamic/generated"] == 16 * record["dataflex/dynamic/rounds"]
        if not record["dataflex/dynamic/short"]:
            assert record["dataflex/dynamic/signal_groups"] == 4 and record["kept_frac"] == 1.0


def _assert_bad_input(args, tmp_path, capsys, expected):
    out = tmp_path / "out"
    assert _run(["--output-dir", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not out.exists()  # nothing written


def test_unknown_strategy(tmp_path, capsys):
    _assert_bad_input(["--strategy", "no_such_preset"], tmp_path, capsys, "invalid strategy")


def test_negative_eval_samples(tmp_path, capsys):
    _assert_bad_input(["--eval-samples", "-1"], tmp_path, capsys, "--eval-samples must be an integer >= 0, got -1")


def test_dataset_missing_column(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "1+1?", "solution": "2"}\n{"question": "2+2?", "solution": "4"}\n')
    _assert_bad_input(
        ["--strategy", "none", "--dataset", str(data), "--prompt-column", "question"],
        tmp_path,
        capsys,
        "available columns: question, solution",
    )


def test_dataset_answers_the_verifier_cannot_read(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": "2+2?", "answer": "four"}\n')
    _assert_bad_input(
        ["--strategy", "none", "--dataset", str(data), "--verifier", "numeric"], tmp_path, capsys, "cannot read"
    )


def test_missing_dataset_file(tmp_path, capsys):
    _assert_bad_input(["--dataset", str(tmp_path / "nope.jsonl")], tmp_path, capsys, "cannot load dataset")


def test_list_prints_components_and_presets(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "presets:" in out and "difffilter" in out and "group_solve_rate" in out
    assert "keep_fraction" not in out  # parameters only with --params


def test_list_params_prints_each_parameter_with_its_default_and_help(capsys):
    assert main(["list", "--params"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["gfpo"])
    block = " ".join(line.strip() for line in lines[start + 1 : start + 5])
    assert "k = 3: responses kept per group" in block and "arXiv 2508.09726" in block
    assert "metric = 'efficiency': what ranks a group's responses" in block
    assert "normalize = 'mean_one': how the weights are rescaled" in "\n".join(lines)  # inherited from Reweighter
    assert "presets:" in lines and "(undocumented)" not in "\n".join(lines)


def test_validate(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("select:\n  scorer: group_solve_rate\n  selector: {name: threshold_band, low: 0.0, high: 1.0}\n")
    assert main(["validate", str(good)]) == 0
    assert "threshold_band" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("select:\n  scorer: no_such_scorer\n  selector: threshold_band\n")
    assert main(["validate", str(bad)]) == 2
    assert "invalid strategy" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.slow
def test_a_run_that_trains_nothing_is_an_error_and_leaves_nothing(tmp_path, monkeypatch):
    from dataflex_callbacks.recipes import runner

    # Skip the up-front row check to reach the guard behind it: 4 training rows, 8 prompts per step, so
    # TRL's sampler yields no batch and train() returns after 0 optimizer steps.
    monkeypatch.setattr(runner, "check_trainable", lambda *args, **kwargs: None)
    options = runner.RunOptions(suite="toy", n_train=1, n_test=5, steps=2, progress=False, strategy="none")
    new_folder = tmp_path / "new" / "run"
    with pytest.raises(runner.RunInputError, match="0 optimizer steps.*--prompts-per-step"):
        runner.run_training(dataclasses.replace(options, output_dir=str(new_folder)))
    assert not (tmp_path / "new").exists()  # the folders this run created are gone
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    with pytest.raises(runner.RunInputError, match="0 optimizer steps"):
        runner.run_training(dataclasses.replace(options, output_dir=str(existing)))
    assert sorted(os.listdir(existing)) == ["notes.txt"]  # a folder the user made stays, without our scratch files
