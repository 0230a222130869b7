"""Every install line in the docs works today (the package is on no index), the Colab install cell picks a source that
exists, and the README names what `dataflex run` trains with by default."""

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "examples" / "colab_grpo_lora.ipynb",
    *sorted((REPO / "examples").rglob("*.py")),
    *sorted((REPO / "examples").rglob("*.sh")),
]
# `pip install dataflex-callbacks`, quoted or not, with or without extras, not followed by ` @ <url or file>`.
FROM_AN_INDEX = re.compile(
    r"""pip install (?:-q )?["']?dataflex-callbacks(?:\[[a-z,]+\])?["']?(?!\s*@)(?=[\s"'`),]|$)"""
)


def test_no_install_line_asks_an_index_for_the_package():
    found = [
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for path in DOCUMENTS
        for match in FROM_AN_INDEX.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, "the package is on no index; install from a clone, a wheel or a git URL:\n" + "\n".join(found)


def test_the_pattern_catches_an_index_install_and_lets_a_git_url_through():
    assert FROM_AN_INDEX.search('pip install "dataflex-callbacks[trl]"')
    assert FROM_AN_INDEX.search("pip install dataflex-callbacks\n")
    assert not FROM_AN_INDEX.search(
        'pip install "dataflex-callbacks[trl] @ git+https://github.com/o/dataflex-callbacks"'
    )


def test_the_readme_names_the_default_strategy_of_dataflex_run():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert re.search(r"default strategy.{0,40}`diffband`", readme, re.S), "say that `dataflex run` uses diffband"
    assert len(readme.splitlines()) <= 150


# ---------------------------------------------------------------- the Colab notebook's install cell


def install_cell() -> str:
    notebook = json.loads((REPO / "examples" / "colab_grpo_lora.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    return next(cell for cell in cells if "PACKAGE =" in cell)


def run_install_cell(monkeypatch, folder, installed: bool = False) -> list[list[str]]:
    """Run the cell in ``folder`` with pip replaced by a recorder; returns the pip commands it ran."""
    calls: list[list[str]] = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(subprocess, "check_call", lambda command: calls.append(command))
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: real_find_spec(name, *args) if installed or name != "dataflex_callbacks" else None,
    )
    monkeypatch.chdir(folder)
    exec(install_cell(), {"__name__": "colab_cell"})  # noqa: S102 - our own notebook's cell
    return calls


def test_the_install_cell_installs_an_uploaded_wheel(monkeypatch, tmp_path):
    (tmp_path / "dataflex_callbacks-0.1.0-py3-none-any.whl").write_bytes(b"")
    calls = run_install_cell(monkeypatch, tmp_path)
    assert calls[-1][-1] == f"dataflex-callbacks[trl] @ file://{tmp_path}/dataflex_callbacks-0.1.0-py3-none-any.whl"


def test_the_install_cell_installs_the_clone_it_sits_in(monkeypatch):
    calls = run_install_cell(monkeypatch, REPO / "examples")
    assert calls[-1][-1] == f"{REPO}[trl]"


def test_the_install_cell_without_a_source_says_how_to_give_one(monkeypatch, tmp_path):
    with pytest.raises(RuntimeError, match=r"not on PyPI.*set PACKAGE.*git\+https://github.com/.*python -m build"):
        run_install_cell(monkeypatch, tmp_path)


def test_the_install_cell_installs_nothing_when_the_package_is_there(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    assert run_install_cell(monkeypatch, tmp_path, installed=True) == []
