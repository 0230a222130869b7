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
    assert "--no-progress hide the progress bar (shown when this flag is not given)" in text
    assert "show a progress bar" not in text and "this flag turns it off" not in text
