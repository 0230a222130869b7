"""`dataflex run --help` says what each flag does when given."""

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402


def help_text(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_no_progress_says_that_it_hides_the_progress_bar(capsys):
    text = help_text(capsys)
    assert (
        "--no-progress hide the progress bar and the start-up lines naming the model, learning rate and data "
        "(shown when this flag is not given)"
    ) in text
    assert "show a progress bar" not in text and "this flag turns it off" not in text


def test_every_no_flag_of_run_and_compare_says_what_turning_it_on_hides(capsys):
    """A `--no-*` flag turns something off: its help must say so, not describe what the option does when on."""
    import argparse

    from dataflex_callbacks.recipes.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    checked = []
    for command in ("run", "compare"):
        for action in commands.choices[command]._actions:
            for flag in (f for f in action.option_strings if f.startswith("--no-")):
                first = action.help.split()[0]
                assert first in ("hide", "skip", "disable", "drop"), (command, flag, action.help)
                assert "when this flag is not given" in action.help, (command, flag, action.help)
                checked.append((command, flag))
    assert ("run", "--no-progress") in checked and ("compare", "--no-progress") in checked
