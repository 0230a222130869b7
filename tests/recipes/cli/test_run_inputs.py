"""A run's inputs the model decides: prompts plus generated tokens past its positions, a `--model` folder that
does not exist. One line on stderr naming the flag the user typed, exit code 2, no folder, for `run` and `compare`."""

import contextlib
import io
import os

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402


def dataflex(args, cwd):
    """`dataflex ARGS` in this process from `cwd`: ``(exit code, stdout, stderr)``."""
    stdout, stderr, previous = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(args)
    finally:
        os.chdir(previous)
    return code, stdout.getvalue(), stderr.getvalue()


def one_line_error(result, folder) -> str:
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dataflex: error: "), err[-3000:]
    assert out == "" and not folder.exists()
    return lines[0]


COMMANDS = {"run": ["run", "--no-progress"], "compare": ["compare", "--no-progress", "--budget", "steps:1"]}


@pytest.mark.parametrize(
    "command, flags, flag, most",
    [
        # The testbed's longest prompt is 14 tokens of its model's 64 positions; the toy suite's 11 of 64.
        ("run", ["--max-completion-length", "60"], "--max-completion-length", 50),
        ("compare", ["--max-completion-length", "60"], "--max-completion-length", 50),
        ("run", ["--suite", "toy", "--eval-max-new-tokens", "60"], "--eval-max-new-tokens", 53),
        ("compare", ["--suite", "toy", "--eval-max-new-tokens", "60"], "--eval-max-new-tokens", 53),
    ],
)
def test_tokens_past_the_models_positions_name_the_flag_typed_before_any_folder(tmp_path, command, flags, flag, most):
    folder = tmp_path / "out"
    line = one_line_error(dataflex([*COMMANDS[command], *flags, "--output-dir", str(folder)], tmp_path), folder)
    assert f"lower {flag} to at most {most}" in line and "max_position_embeddings" in line
    assert "GRPOConfig" not in line and "max_completion_length" not in line  # TRL's field is not the CLI's flag


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_prompt_that_alone_fills_the_positions_says_so_instead_of_a_length_of_0(tmp_path, command):
    data = tmp_path / "long.jsonl"
    rows = [f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}' for i in range(20)]
    data.write_text("\n".join([*rows, '{"prompt": "' + "1+" * 40 + '1=", "answer": "41"}']) + "\n")
    folder = tmp_path / "out"
    args = [*COMMANDS[command], "--suite", "toy", "--dataset", str(data), "--output-dir", str(folder)]
    line = one_line_error(dataflex(args, tmp_path), folder)
    assert "is 82 tokens" in line and "holds 64 positions (max_position_embeddings" in line
    assert "the prompt alone does not fit" in line and "at most 0" not in line


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("model", ["./no_such_model", "models/no/such_model", "~/no_such_model_t46"])
def test_a_model_path_that_does_not_exist_is_no_such_folder(tmp_path, command, model):
    folder = tmp_path / "out"
    args = [*COMMANDS[command], "--model", model, "--output-dir", str(folder)]
    line = one_line_error(dataflex(args, tmp_path), folder)
    assert f"--model {model!r}: no such folder" in line and "repo" not in line.lower()
