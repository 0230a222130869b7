"""The package's import graph: the core imports no recipe, integration or host framework, and nothing is cyclic.

Every ``import`` statement counts, also those inside functions (a lazy import is still a dependency);
imports under ``if TYPE_CHECKING:`` never run, so the layer check leaves them out, but the cycle check
counts them too: two modules that name each other, even for type hints only, are one idea split in two.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"dataflex_callbacks": REPO / "dataflex_callbacks"}
NOT_CORE = ("dataflex_callbacks.recipes", "dataflex_callbacks.integrations", "dataflex_callbacks.__main__")
HOST_FRAMEWORKS = ("trl", "lightning", "pytorch_lightning", "verl", "transformers", "accelerate", "peft", "datasets")


def find_modules(package_dirs: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is_package) for every ``.py`` file under the package folders."""
    modules: dict[str, tuple[Path, bool]] = {}
    for prefix, folder in package_dirs.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            modules[".".join([prefix, *parts])] = (path, is_package)
    return modules


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST, type_checking: bool = False):
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_checking and _type_checking_block(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_edges(modules: dict[str, tuple[Path, bool]], type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the names it imports: package modules by their dotted name, outside ones by their top name.

    ``type_checking``: count the imports under ``if TYPE_CHECKING:`` too.
    """
    edges: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path)), type_checking):
            if isinstance(node, ast.Import):
                bases, names = [alias.name for alias in node.names], []
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                bases, names = [base], [alias.name for alias in node.names]
            for base in bases:
                inner = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
                if inner:
                    targets.update(inner)
                if base in modules:
                    if not inner or len(inner) < len(names):
                        targets.add(base)
                elif base.split(".")[0] == "dataflex_callbacks":
                    while base and base not in modules:
                        base = base.rpartition(".")[0]
                    targets.add(base)
                elif not inner:
                    targets.add(base.split(".")[0])
        targets.discard(name)
        edges[name] = targets
    return edges


def forbidden_core_imports(edges: dict[str, set[str]]) -> list[str]:
    """``core module -> target`` for each core import of a recipe, an integration or a host framework."""
    found = []
    for module, targets in sorted(edges.items()):
        if module.startswith(NOT_CORE):
            continue
        for target in sorted(targets):
            if target.startswith(NOT_CORE) or target.split(".")[0] in HOST_FRAMEWORKS:
                found.append(f"{module} -> {target}")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_core_imports_no_recipe_integration_or_host_framework():
    edges = import_edges(find_modules(PACKAGE_DIRS))
    assert "dataflex_callbacks.recipes.runner" in edges and "dataflex_callbacks.integrations.trl.callback" in edges
    assert forbidden_core_imports(edges) == []


def test_the_package_has_no_import_cycle():
    edges = import_edges(find_modules(PACKAGE_DIRS))
    assert cycles(edges) == []


def test_the_core_and_the_adapters_have_no_import_cycle_through_type_hints_either():
    edges = import_edges(find_modules(PACKAGE_DIRS), type_checking=True)
    assert "dataflex_callbacks.integrations.lightning.callback" in edges["dataflex_callbacks.integrations.lightning"]
    assert cycles(edges) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checks_find_a_lazy_recipe_import_and_a_cycle(tmp_path):
    _write(
        tmp_path / "pkg",
        {
            "__init__.py": "from .core import run\n",
            "core.py": "def run():\n    from .recipes.job import main\n    import trl\n    return main\n",
            "registry.py": "def load():\n    from . import parts\n",
            "parts.py": "from .registry import load\n",
            "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .hinted import Hint\n",
            "hinted.py": "from .typed import x\n",
            "recipes/__init__.py": "",
            "recipes/job.py": "from pkg import core\n",
        },
    )
    global NOT_CORE
    saved = NOT_CORE
    NOT_CORE = ("pkg.recipes",)
    try:
        edges = import_edges(find_modules({"pkg": tmp_path / "pkg"}))
        assert forbidden_core_imports(edges) == ["pkg.core -> pkg.recipes.job", "pkg.core -> trl"]
        assert sorted(cycles(edges)) == [["pkg.core", "pkg.recipes.job"], ["pkg.parts", "pkg.registry"]]
        assert edges["pkg.typed"] == {"typing"}
        with_hints = import_edges(find_modules({"pkg": tmp_path / "pkg"}), type_checking=True)
        assert ["pkg.hinted", "pkg.typed"] in cycles(with_hints)
    finally:
        NOT_CORE = saved


# The package's folders in layer order (docs/architecture.md): a module imports only its own layer and those before it.
LAYERS = (
    ("dataflex_callbacks.errors", "dataflex_callbacks._plain_values", "dataflex_callbacks._distributed"),
    ("dataflex_callbacks.registry",),
    ("dataflex_callbacks.config",),
    ("dataflex_callbacks.rollout",),
    ("dataflex_callbacks.metrics",),
    ("dataflex_callbacks.components", "dataflex_callbacks.mixing"),
    ("dataflex_callbacks.strategy",),
    ("dataflex_callbacks.sampling",),
    ("dataflex_callbacks.host",),
    ("dataflex_callbacks.testing",),
    ("dataflex_callbacks.integrations",),
    ("dataflex_callbacks.recipes", "dataflex_callbacks.__main__"),
)


def layer_of(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """``module -> target`` for each import of a later layer (the package root, which re-exports, is left out)."""
    found = []
    for module, targets in sorted(edges.items()):
        own = layer_of(module)
        for target in sorted(targets):
            other = layer_of(target) if target.startswith("dataflex_callbacks.") else None
            if own is not None and other is not None and other > own:
                found.append(f"{module} -> {target}")
    return found


def test_every_module_has_a_layer_and_imports_no_later_one():
    edges = import_edges(find_modules(PACKAGE_DIRS))
    assert [m for m in edges if m != "dataflex_callbacks" and layer_of(m) is None] == []
    assert upward_imports(edges) == []


# Folders that share a layer and stay independent: neither imports the other.
SIBLINGS = (("dataflex_callbacks.components", "dataflex_callbacks.mixing"),)


def sibling_imports(edges: dict[str, set[str]]) -> list[str]:
    """``module -> target`` for each import between two sibling folders of `SIBLINGS`."""
    found = []
    for module, targets in sorted(edges.items()):
        for pair in SIBLINGS:
            for own, other in (pair, pair[::-1]):
                if module == own or module.startswith(own + "."):
                    found += [f"{module} -> {t}" for t in sorted(targets) if t == other or t.startswith(other + ".")]
    return found


def test_sibling_folders_do_not_import_each_other():
    assert sibling_imports(import_edges(find_modules(PACKAGE_DIRS))) == []
    edges = {"dataflex_callbacks.mixing.tracker": {"dataflex_callbacks.components.scorers"}}
    assert sibling_imports(edges) == ["dataflex_callbacks.mixing.tracker -> dataflex_callbacks.components.scorers"]


def test_an_import_up_the_layers_is_found():
    edges = {
        "dataflex_callbacks.config._loading": {"dataflex_callbacks.components.scorers"},
        "dataflex_callbacks.host.contract": {"dataflex_callbacks.strategy.strategy"},
    }
    assert upward_imports(edges) == ["dataflex_callbacks.config._loading -> dataflex_callbacks.components.scorers"]
