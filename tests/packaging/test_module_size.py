"""Small modules, short functions: every module of the package at most 600 lines, every function at most 80.

A function's length counts its code, not its docstring (documentation is never the reason to split).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dataflex_callbacks"
MODULE_LINES = 600
FUNCTION_LINES = 80


def long_functions(source: str, limit: int = FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(name, code lines)`` of each function in ``source`` longer than ``limit`` lines, its docstring left out."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno  # the body: the `def` line left out
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                first = node.body[0]
                length -= first.end_lineno - first.lineno + 1
            if length > limit:
                found.append((node.name, length))
    return found


def test_every_module_is_at_most_600_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MODULE_LINES} == {}


def test_every_function_is_at_most_80_lines_of_code():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if long := long_functions(path.read_text()):
            found[str(path.relative_to(PACKAGE))] = long
    assert found == {}


def test_the_function_check_counts_code_not_the_docstring():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    docstring = '    """' + "\n    text" * 30 + '\n    """\n'
    assert long_functions(f"def fits():\n{docstring}{body}\n") == []
    assert long_functions(f"def long():\n{body}\n    return x0\n") == [("long", FUNCTION_LINES + 1)]
