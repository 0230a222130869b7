"""Every error the package raises on purpose is a `DataFlexError` subclass chosen by what went wrong.

A static walk over the core, the adapters and the recipes: a ``raise`` of a built-in exception class
(``ValueError``, ``TypeError``, ...) is a user-facing error without our class, so users cannot catch
the library's errors as one family nor tell a bad config from a bad batch or a bad host.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import dataflex_callbacks.errors as errors

REPO = Path(__file__).resolve().parents[2]
FOLDERS = (REPO / "dataflex_callbacks",)
BUILTIN_ERRORS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}
# (file, line text) of raises that never reach a user: converted on the spot by the enclosing handler.
INTERNAL = {
    (
        "dataflex_callbacks/sampling/_sampler_state.py",
        "raise TypeError(f\"proportions is a {type(state['proportions']).__name__}\")",
    ),
    # A module __getattr__ must raise AttributeError: that is how `hasattr` and `from ... import` ask.
    (
        "dataflex_callbacks/integrations/trl/__init__.py",
        'raise AttributeError(f"module {__name__!r} has no attribute {name!r}")',
    ),
}


def builtin_raises(folders=FOLDERS, repo=REPO) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            source = path.read_text()
            for node in ast.walk(ast.parse(source)):
                if not isinstance(node, ast.Raise) or node.exc is None:
                    continue
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(target, ast.Name) and target.id in BUILTIN_ERRORS - {
                    "NotImplementedError",
                    "StopIteration",
                    "KeyboardInterrupt",
                    "SystemExit",
                }:
                    where = str(path.relative_to(repo))
                    text = ast.get_source_segment(source, node).splitlines()[0].strip()
                    if (where, text) not in INTERNAL:
                        found.append(f"{where}:{node.lineno}: {text}")
    return found


def test_no_user_facing_raise_of_a_builtin_exception_class():
    assert builtin_raises() == []


def test_the_walk_finds_a_builtin_raise(tmp_path):
    """The check itself can fail: a module with ``raise ValueError`` is reported."""
    (tmp_path / "bad.py").write_text("def f():\n    raise ValueError('x')\n")
    assert builtin_raises((tmp_path,), tmp_path) == ["bad.py:2: raise ValueError('x')"]


def test_every_error_class_is_a_dataflex_error_and_keeps_its_builtin_base():
    """Code that caught the built-in class before keeps working: each class keeps the base it replaced."""
    expected = {
        errors.ConfigError: ValueError,
        errors.ParamError: ValueError,
        errors.BatchError: ValueError,
        errors.StateError: ValueError,
        errors.ComponentError: ValueError,
        errors.InputError: ValueError,
        errors.HostError: RuntimeError,
        errors.WrongHostError: TypeError,
    }
    for cls, base in expected.items():
        assert issubclass(cls, errors.DataFlexError) and issubclass(cls, base), cls
