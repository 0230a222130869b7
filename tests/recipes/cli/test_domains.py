"""One domain default: `dataflex run` and `dataflex compare` read a `domain` column when the data has one, as
the TRL adapter, the Lightning callback and the sampler do, and say on the console which column they read."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402
from dataflex_callbacks.recipes.options import RunOptions  # noqa: E402
from dataflex_callbacks.recipes.run_inputs import load_data  # noqa: E402
from dataflex_callbacks.recipes.runner import data_line  # noqa: E402


def _write(path, with_domain: bool, rows: int = 20):
    lines = []
    for i in range(rows):
        row = {"prompt": f"{i}+1=", "answer": str(i + 1)}
        if with_domain:
            row["domain"] = "add" if i % 2 else "inc"
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_run_reads_the_domain_column_and_names_it_on_the_console(tmp_path, capsys):
    data = _write(tmp_path / "mine.jsonl", with_domain=True)
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--strategy",
                "diffband",
                "--dataset",
                str(data),
                "--steps",
                "1",
                "--prompts-per-step",
                "2",
                "--num-generations",
                "2",
                "--n-test",
                "4",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"dataflex run: data: {data} (16 training rows, 4 held out); domains (column 'domain'): add, inc" in printed
    strategy_line = next(line for line in printed.splitlines() if line.startswith("dataflex: strategy 'diffband'"))
    assert "; domains (column 'domain'): add, inc" in strategy_line  # the reward it selects on may follow
    config = json.loads((out / "config.json").read_text())
    assert set(config["n_test_rows_per_domain"]) <= {"add", "inc"} and config["n_test_rows"] == 4


def test_data_without_a_domain_column_is_one_domain_and_the_line_names_the_fix(tmp_path):
    data = _write(tmp_path / "plain.jsonl", with_domain=False)
    options = RunOptions(dataset=str(data), n_test=4)
    data_of_run = load_data(options)
    assert set(data_of_run.train["domain"]) == set(data_of_run.test["domain"]) == {"all"}
    line = data_line(options, data_of_run)
    assert line == (
        f"dataflex run: data: {data} (16 training rows, 4 held out); domains: one ('all'): {data} has no "
        "'domain' column (--domain-key names the column holding each row's domain)"
    )


def test_domain_key_still_chooses_another_column(tmp_path):
    data = tmp_path / "topic.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1), "domain": "x", "topic": "t" + str(i % 2)})
            for i in range(20)
        )
        + "\n"
    )
    options = RunOptions(dataset=str(data), n_test=2, domain_key="topic")
    data_of_run = load_data(options)
    assert set(data_of_run.train["domain"]) | set(data_of_run.test["domain"]) == {"t0", "t1"}
    assert data_of_run.domain_key == "topic"
    assert data_line(options, data_of_run).endswith("domains (column 'topic'): t0, t1")


def test_compare_states_the_data_and_its_domain_column_before_the_runs(tmp_path):
    from dataflex_callbacks.recipes.compare import Budget, CompareSettings
    from dataflex_callbacks.recipes.compare.grid import build_strategies, check_data

    data = _write(tmp_path / "mine.jsonl", with_domain=True)
    settings = CompareSettings(
        strategies=["baseline", "difffilter"],
        seeds=[0],
        budget=Budget.parse("steps:1"),
        base=RunOptions(dataset=str(data), n_test=4, prompts_per_step=2, num_generations=2),
        output_dir=str(tmp_path / "cmp"),
        progress=False,
    )
    line = check_data(settings, build_strategies(settings))
    assert line.startswith(f"dataflex compare: data: {data} (16 training rows, 4 held out); ")
    assert line.endswith("domains (column 'domain'): add, inc")
