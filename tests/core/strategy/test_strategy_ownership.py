"""A `Strategy`'s state is written by its own methods: no other module of the package assigns its attributes.

Every module is read with ``ast`` (nothing is imported, so the adapters are read without their
host frameworks). A write is an assignment (``=``, ``+=``, an annotated one), a ``del`` or a
``setattr(...)`` whose object is a strategy: a name or attribute called ``strategy`` (``strategy``,
``self.strategy``, ``callback.strategy``, ``self._strategy``), a parameter annotated ``Strategy``, or
a local name bound to one of these or to ``build_strategy(...)`` / ``as_strategy(...)`` /
``Strategy(...)``. Writing inside a strategy's parts (``strategy.mixing.x = ...``) counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "dataflex_callbacks"
EXAMPLES = PACKAGE.parent / "examples"
OWNER = PACKAGE / "strategy" / "strategy.py"
STRATEGY_NAMES = ("strategy", "_strategy")
STRATEGY_BUILDERS = ("build_strategy", "as_strategy", "Strategy")


def _annotated_strategy(annotation: ast.AST | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).strip("'\"")
    return any(
        part.strip() == "Strategy" for part in text.replace("|", ",").replace("[", ",").replace("]", ",").split(",")
    )


class _StrategyWrites(ast.NodeVisitor):
    """Collect ``(line, code)`` of every write to a strategy's attributes in one module."""

    def __init__(self):
        self.found: list[tuple[int, str]] = []
        self.aliases: list[set[str]] = [set()]  # per function scope: local names that hold a strategy

    def is_strategy(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in STRATEGY_NAMES or node.id in self.aliases[-1]
        if isinstance(node, ast.Attribute):
            return node.attr in STRATEGY_NAMES
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            return name in STRATEGY_BUILDERS
        return False

    def writes_into_strategy(self, target: ast.AST) -> bool:
        """Whether ``target`` is an attribute (or item) of a strategy, or of something reached from one."""
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(self.writes_into_strategy(element) for element in target.elts)
        if isinstance(target, ast.Starred):
            return self.writes_into_strategy(target.value)
        node = target
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
            if self.is_strategy(node):
                return True
        return False

    def _function(self, node):
        arguments = node.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
        self.aliases.append({a.arg for a in every if a is not None and _annotated_strategy(a.annotation)})
        self.generic_visit(node)
        self.aliases.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _record(self, node: ast.AST) -> None:
        self.found.append((node.lineno, ast.unparse(node).splitlines()[0]))

    def visit_Assign(self, node: ast.Assign):
        if any(self.writes_into_strategy(target) for target in node.targets):
            self._record(node)
        elif self.is_strategy(node.value):
            self.aliases[-1].update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if self.writes_into_strategy(node.target):
            self._record(node)
        elif isinstance(node.target, ast.Name) and (
            _annotated_strategy(node.annotation) or (node.value is not None and self.is_strategy(node.value))
        ):
            self.aliases[-1].add(node.target.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign):
        if self.writes_into_strategy(node.target):
            self._record(node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete):
        if any(self.writes_into_strategy(target) for target in node.targets):
            self._record(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call):
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ("setattr", "delattr")
            and node.args
            and (self.is_strategy(node.args[0]) or self.writes_into_strategy(node.args[0]))
        ):
            self._record(node)
        self.generic_visit(node)


def strategy_writes(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each write to a strategy's attributes in ``source``."""
    visitor = _StrategyWrites()
    visitor.visit(ast.parse(source))
    return visitor.found


def test_no_module_but_the_strategys_own_writes_its_attributes():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == OWNER:
            continue
        for line, code in strategy_writes(path.read_text()):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {code}")
    assert not found, (
        "these modules write a Strategy's attributes; give Strategy a method (or pass the value "
        "as an argument) instead:\n" + "\n".join(found)
    )


def test_the_check_sees_every_way_of_writing():
    source = """
def plain(strategy, other):
    strategy.warn = False
    other.strategy.buffer = 1
    other.strategy.mixing.target = {}
    strategy.config["x"] = 1
    strategy.count += 1
    setattr(strategy, "name", "x")
    del strategy.name

def typed(s: "Strategy", t: Strategy | None):
    s.name = "x"
    t.name: str = "x"

class Host:
    def bind(self, given):
        self._strategy.name = "x"
        held = self.strategy
        held.name = "x"
        built = build_strategy(given)
        built.name = "x"
        first, self.strategy.name = 1, 2
"""
    assert [line for line, _ in strategy_writes(source)] == [3, 4, 5, 6, 7, 8, 9, 12, 13, 17, 19, 21, 22]


def test_reading_a_strategy_or_writing_something_else_is_no_write():
    source = """
def fine(strategy, callback, trainer):
    callback.strategy = strategy
    trainer.dataflex = callback
    name = strategy.name
    strategy.apply(batch, 0)
    strategy_config = strategy.config
    strategy_config.name = "x"
    config = StrategyConfig()
    config.select = None
"""
    assert strategy_writes(source) == []


CONFIG_OBJECTS = ("config", "typed")  # a StrategyConfig (or its loader's copy) has a ``pre_select`` field too


def pre_select_reads(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every ``<object>.pre_select`` a module reads, but a config's field."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "pre_select":
            owner = ast.unparse(node.value)
            if not owner.split(".")[-1].endswith(CONFIG_OBJECTS):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_the_strategy_reaches_its_pre_select_part():
    """Hosts draw prompts through the Strategy's own methods (`Strategy.accept_from`, ...), never its filter."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == OWNER.parent:
            continue
        reads = pre_select_reads(path.read_text())
        if reads:
            found[str(path.relative_to(PACKAGE))] = reads
    assert found == {}


def test_the_pre_select_check_sees_a_read_and_not_a_config_field():
    source = "def f(strategy, config, settings):\n    a = strategy.pre_select\n    b = settings.config.pre_select\n"
    assert pre_select_reads(source) == [(2, "strategy.pre_select")]


class _AllocationReads(_StrategyWrites):
    """Collect ``(line, code)`` of every ``<strategy>.allocation`` read (strategies found as `_StrategyWrites` does)."""

    def visit_Attribute(self, node: ast.Attribute):
        if node.attr == "allocation" and self.is_strategy(node.value):
            self._record(node)
        self.generic_visit(node)


def allocation_reads(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each read of a strategy's ``allocation`` part in ``source``."""
    visitor = _AllocationReads()
    visitor.visit(ast.parse(source))
    return visitor.found


def test_only_the_strategy_reaches_its_allocation_part():
    """Hosts allocate rollouts through the Strategy's doors (`Strategy.allocation_rounds`, ``allocation_needs``...),
    and so do the examples users copy (a module reaching ``self.dataflex.strategy.allocation``)."""
    found = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *EXAMPLES.rglob("*.py")]):
        if path.parent == OWNER.parent:
            continue
        reads = allocation_reads(path.read_text())
        if reads:
            found[str(path.relative_to(PACKAGE.parent))] = reads
    assert found == {}


def test_the_allocation_check_sees_every_way_of_reaching_it():
    source = """
def f(strategy, callback, s: Strategy):
    a = strategy.allocation
    b = callback.strategy.allocation.pilot
    c = s.allocation
    held = self._strategy
    d = held.allocation
    e = callback.allocation
    f = config.allocation
"""
    assert [line for line, _ in allocation_reads(source)] == [3, 4, 5, 7]


ALLOCATOR_CLASS = "Allocator"  # every allocator class's name ends so (docs/architecture.md, "One name per concept")


def allocator_isinstance(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each ``isinstance``/``issubclass`` test against an allocator class in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
        ):
            classes = node.args[1:2]
            names = [n for c in classes for n in ast.walk(c) if isinstance(n, (ast.Name, ast.Attribute))]
            if any((n.id if isinstance(n, ast.Name) else n.attr).endswith(ALLOCATOR_CLASS) for n in names):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_host_asks_an_allocator_its_class():
    """Hosts read what an allocator declares (`AllocatorNeeds`), never its class: only components/ tests it."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE / "components":
            continue
        tests = allocator_isinstance(path.read_text())
        if tests:
            found[str(path.relative_to(PACKAGE))] = tests
    assert found == {}


def test_the_class_check_sees_an_allocator_class():
    source = "isinstance(a, ScreenAllocator)\nisinstance(a, (int, alloc.AdaptiveAllocator))\nisinstance(a, Scorer)\n"
    assert [line for line, _ in allocator_isinstance(source)] == [1, 2]
