"""`load_example(name)`: a script of examples/ loaded as a module, as `python examples/<name>.py` reads it."""

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a fresh module (its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no example {name!r} in {EXAMPLES}"
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example
