"""Docs that cannot drift: every code name README.md and docs/*.md put in backticks exists in the package.

The docs name the package's code inline, in backticks, in two forms, and both are checked:

- dotted, ``module.name`` (`host.decide`, `Strategy.bind_domains`, `dataflex_callbacks.host.decide`): the path
  must resolve, importing ``dataflex_callbacks.<...>`` part by part, then by attribute (a class's attributes
  include its dataclass fields and what its methods set on ``self``; past such an instance attribute nothing is
  known, so nothing more is checked);
- a call, ``name(...)`` (`decide(..., seed=...)`, `screen(pilot, rule)`): a bare name must be a function, class
  or method somewhere in the package, or a registered component; every keyword the call spells must be a
  parameter of that callable, and a registered component's listed parameter names must be its parameters.

Which spans are ours is decided by their first part, not guessed: ``dataflex_callbacks``, the name of one of its
modules or packages (`host`, `batch`, `parts`), a class it defines (`Strategy`), or a name the docs give an
instance of one (`INSTANCE_NAMES`). Anything else in backticks is another thing (a config key `mix.domains`, a
flag, a shell command, a file `strategy.py`, another library's name `trl.GRPOTrainer`) and is left alone, as
are fenced code blocks (the examples run in their own tests) and the short, explicit lists below.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import importlib.util
import inspect
import re
import textwrap
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "dataflex_callbacks"
PACKAGE_DIR = REPO / PACKAGE
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Names the docs give an instance of one of our classes (`strategy.apply`, `sampler.state_dict()`).
INSTANCE_NAMES = {
    "strategy": ("Strategy",),
    "sampler": ("DomainMixingSampler",),
    "decision": ("Decision",),
    "batch": ("RolloutBatch",),
    "tracker": ("DomainTracker",),
    "rounds": ("AllocationRounds",),
    "done": ("AllocatedGroups",),
    "allocator": ("Allocator", "AdaptiveAllocator", "ScreenAllocator"),
    "buffer": ("SignalGroupBuffer",),
    "taken": ("SignalGroups",),
    "callback": ("DataFlexCallback",),
    "warning": ("DroppedAllWarning",),
    "error": ("ParamError",),
}
# A first part naming a library the package imports (`torch`, `trl`, `verl`) means that library, and a call of a
# name the package imports from one (`GRPOConfig(...)`) is that library's: both are read off the package's imports.
# These first parts share a name with a module of ours but mean another thing in the docs: the host's trainer
# object (`trainer.train()`) and verl's config sections (`rollout.seed`, `trainer.default_local_dir`).
FOREIGN_ROOTS = {"trainer", "rollout"}
# Calls that are Python's or the docs' maths (`softmax(V_d / T)`, `sqrt(n)`), not a name of the package.
NOT_CODE = set(dir(builtins)) | {"exp", "log", "sqrt", "floor", "softmax", "Beta", "p", "sd"}
# Calls of other code the package does not import by name: Lightning's `Trainer(...)`, TRL's `AsyncGRPOConfig(...)`,
# transformers' `train()`, torchmetrics' `add_state(...)`, verl's `compute_advantage(...)`, Linux's `prctl(...)`;
# and a function the user writes, named by the parameter that takes it (`check_component(reference=...)`).
OTHER_CALLS = {"Trainer", "AsyncGRPOConfig", "train", "add_state", "compute_advantage", "prctl", "reference"}
FILE_SUFFIXES = {"py", "md", "json", "jsonl", "yaml", "yml", "pt", "png", "csv", "txt", "sh", "toml", "cfg"}

IDENTIFIER = r"[A-Za-z_]\w*"
DOTTED_RE = re.compile(rf"{IDENTIFIER}(?:\.{IDENTIFIER})+")
CALL_RE = re.compile(rf"(?P<name>{IDENTIFIER}(?:\.{IDENTIFIER})*)\((?P<args>.*)\)", re.S)
KEYWORD_RE = re.compile(rf"\s*\*{{0,2}}(?P<name>{IDENTIFIER})\s*=(?!=)")
INLINE_CODE_RE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
FENCE_RE = re.compile(r"^\s*(```|~~~)")


# ---------------------------------------------------------------------------- reading the docs


def code_spans(text: str) -> list[tuple[int, str]]:
    """``(line number, text)`` of each inline code span outside fenced code blocks."""
    spans, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            spans += [(number, match.group(2).strip()) for match in INLINE_CODE_RE.finditer(line)]
    return spans


def _outside_quotes(text: str):
    """``(index, character, depth)`` for each character outside quotes; depth: brackets open around it."""
    depth, quote = 0, None
    for index, char in enumerate(text):
        if quote or char in "\"'":
            quote = None if char == quote else quote or char
            continue
        depth -= char in ")]}"
        yield index, char, depth
        depth += char in "([{"


def top_level_args(args: str) -> list[str]:
    """The arguments of a call's text, split at the commas outside brackets and quotes."""
    cuts = [index for index, char, depth in _outside_quotes(args) if char == "," and depth == 0]
    parts = [args[start + 1 : end] for start, end in zip([-1, *cuts], [*cuts, len(args)], strict=True)]
    return [part.strip() for part in parts if part.strip()]


@dataclasses.dataclass(frozen=True)
class CodeName:
    """A span that names code: its dotted path, and for a call its argument texts."""

    path: tuple[str, ...]
    call_args: tuple[str, ...] | None = None  # None: not a call

    @property
    def keywords(self) -> list[str]:
        found = [KEYWORD_RE.match(arg) for arg in self.call_args or ()]
        return [match.group("name") for match in found if match]


def parse_span(span: str) -> CodeName | None:
    """The code name a span writes, or None when it is no dotted name and no single call."""
    call = CALL_RE.fullmatch(span)
    closing = [index for index, char, depth in _outside_quotes(span) if char == ")" and depth == 0]
    if call and closing[:1] == [len(span) - 1]:  # one call, nothing after it: not `sd(d) / sqrt(n)`
        return CodeName(tuple(call.group("name").split(".")), tuple(top_level_args(call.group("args"))))
    if DOTTED_RE.fullmatch(span) and span.rsplit(".", 1)[1] not in FILE_SUFFIXES:
        return CodeName(tuple(span.split(".")))
    return None


# ---------------------------------------------------------------------------- the package's names


def _module_file(module: str) -> Path:
    path = REPO.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(_module_file(module).read_text(encoding="utf-8"))


@cache
def package_modules() -> dict[str, list[str]]:
    """A module's or package's own name -> the dotted names of the package's modules so named."""
    modules: dict[str, list[str]] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] != "__main__":
            modules.setdefault(parts[-1], []).append(".".join(parts))
    return modules


def _all_modules() -> list[str]:
    return [module for dotted in package_modules().values() for module in dotted]


@cache
def package_definitions() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Every function and class the package's source defines, and every method: name -> ``(module, path)``."""
    found: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for module in _all_modules():
        for node in _tree(module).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.setdefault(node.name, []).append((module, (node.name,)))
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found.setdefault(member.name, []).append((module, (node.name, member.name)))
    return found


@cache
def package_classes() -> dict[str, list[str]]:
    """A class the package defines at module level -> the modules defining it."""
    classes: dict[str, list[str]] = {}
    for module in _all_modules():
        for node in _tree(module).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(module)
    return classes


@cache
def foreign_imports() -> tuple[frozenset[str], frozenset[str]]:
    """The libraries the package imports (top-level names) and the names it imports from them."""
    libraries, names = set(), set()
    for module in _all_modules():
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.Import):
                libraries.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                libraries.add(node.module.split(".")[0])
                if not node.module.startswith(PACKAGE):
                    names.update(alias.asname or alias.name for alias in node.names)
    return frozenset(libraries - {PACKAGE}), frozenset(names)


@cache
def registered_components() -> dict[str, list[str]]:
    """A registered component's name or alias -> its kinds."""
    from dataflex_callbacks import list_components
    from dataflex_callbacks.registry import KINDS

    names: dict[str, list[str]] = {}
    for kind in KINDS:
        for name in list_components(kind, include_aliases=True):
            names.setdefault(name, []).append(kind)
    return names


# ---------------------------------------------------------------------------- resolving a name


@cache
def _import(module: str):
    """The module, or None when it needs a library that is not installed here (then its source is read)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if (error.name or "").split(".")[0] == PACKAGE:
            raise
        return None


def _self_stores(node: ast.AST) -> set[str]:
    """The attributes the methods of a class set on ``self``."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and getattr(n.value, "id", None) == "self"
    }


def _instance_attributes(cls: type) -> set[str]:
    """What an instance of ``cls`` holds beyond its class's attributes: fields, annotations, ``self.x = ...``."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith(PACKAGE):
            continue
        names.update(getattr(klass, "__annotations__", {}))
        if dataclasses.is_dataclass(klass):
            names.update(field.name for field in dataclasses.fields(klass))
        try:
            names.update(_self_stores(ast.parse(textwrap.dedent(inspect.getsource(klass)))))
        except (OSError, TypeError):  # a class made at run time has no source to read
            continue
    return names


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """The names a module's source binds at its top level: definitions, assignments, imports."""
    bound: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update({target.id: node for target in targets if isinstance(target, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update({(alias.asname or alias.name).split(".")[0]: node for alias in node.names})
    return bound


def _class_members(node: ast.ClassDef, scope: dict[str, ast.AST]) -> set[str]:
    """A class's members as its source writes them, with those of its bases defined in the same module."""
    members = _self_stores(node) | set(_top_level(ast.Module(body=node.body, type_ignores=[])))
    for base in node.bases:
        if isinstance(base, ast.Name) and isinstance(scope.get(base.id), ast.ClassDef):
            members |= _class_members(scope[base.id], scope)
    return members


def in_source(module: str, path: tuple[str, ...]) -> bool:
    """Whether the source of ``module`` defines ``path``: a top-level name, or a member of a class there."""
    if not path:
        return True
    scope = _top_level(_tree(module))
    node = scope.get(path[0])
    if len(path) == 1:
        return node is not None
    return isinstance(node, ast.ClassDef) and len(path) == 2 and path[1] in _class_members(node, scope)


def resolve_in(module: str, path: tuple[str, ...]) -> list[object] | None:
    """What ``module.<path>`` names: ``[object]``, ``[]`` (an instance attribute, or read from the source of a
    module that needs a library missing here), or None when it is absent. Submodules are imported part by part."""
    obj = _import(module)
    if obj is None:
        return [] if in_source(module, path) else None
    for index, name in enumerate(path):
        submodule = f"{obj.__name__}.{name}" if inspect.ismodule(obj) else ""
        if submodule and hasattr(obj, "__path__") and importlib.util.find_spec(submodule) is not None:
            return resolve_in(submodule, path[index + 1 :])
        if hasattr(obj, name):
            obj = getattr(obj, name)
        elif inspect.isclass(obj) and name in _instance_attributes(obj):
            return []  # what an instance attribute holds, and so its own attributes, is not known from the class
        else:
            return None
    return [obj]


def _starts(first: str, rest: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """Where a name of ours may start: the package, a module so named, a class so named or so instantiated."""
    starts = [(PACKAGE, rest)] if first == PACKAGE else []
    starts += [(module, rest) for module in package_modules().get(first, [])]
    for cls in (first, *INSTANCE_NAMES.get(first, ())):
        starts += [(module, (cls, *rest)) for module in package_classes().get(cls, [])]
    if not rest:  # a bare call: any function, class or method so named
        starts += package_definitions().get(first, [])
    return starts


def resolve(code: CodeName) -> tuple[bool, list[object]] | None:
    """``(found, objects)`` for a name of ours; None when the name is another thing's."""
    first, rest = code.path[0], code.path[1:]
    libraries, imported = foreign_imports()
    if first in FOREIGN_ROOTS or (first in libraries and rest):
        return None
    if not rest and first in registered_components():
        return True, [obj for module, path in _starts(first, rest) for obj in resolve_in(module, path) or []]
    starts = _starts(first, rest)
    if not starts:
        if rest or first in NOT_CODE | OTHER_CALLS | imported:
            return None
        return False, []
    found = [resolve_in(module, path) for module, path in starts]
    return any(objects is not None for objects in found), [obj for objects in found for obj in objects or []]


def _unknown_parameters(obj: object, names: list[str]) -> list[str]:
    """The ``names`` that are no parameter of ``obj`` (none when it takes ``**kwargs`` or has no signature)."""
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return []
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return []
    return [name for name in names if name not in {parameter.name for parameter in parameters}]


def _component_params(name: str) -> set[str]:
    from dataflex_callbacks.registry import component_params

    return {param.name for kind in registered_components().get(name, []) for param in component_params(kind, name)}


def check(code: CodeName) -> str | None:
    """Why ``code`` is wrong, or None when it exists (or is not ours)."""
    resolved = resolve(code)
    if resolved is None:
        return None
    found, objects = resolved
    name = ".".join(code.path)
    if not found:
        return f"{name} is not in the package"
    callables = [obj for obj in objects if callable(obj)]
    if code.keywords and callables:
        unknown = min((_unknown_parameters(obj, code.keywords) for obj in callables), key=len)
        if unknown:
            return f"{name}(...) has no parameter {', '.join(unknown)}"
    listed = [arg for arg in code.call_args or () if arg.isidentifier()]
    if name in registered_components() and listed and len(listed) == len(code.call_args or ()):
        unknown = [arg for arg in listed if arg not in _component_params(name)]
        if unknown and all(_unknown_parameters(obj, listed) for obj in callables):
            return f"component {name} has no parameter {', '.join(unknown)}"
    return None


def problems_in(text: str, source: str) -> list[str]:
    """Each code name of ``text`` that is not in the package, as ``source:line: `span`: why``."""
    problems = []
    for line, span in code_spans(text):
        code = parse_span(span)
        why = None if code is None else check(code)
        if why:
            problems.append(f"{source}:{line}: `{span}`: {why}")
    return problems


# ---------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_code_name_in_the_docs_exists(doc):
    problems = problems_in(doc.read_text(encoding="utf-8"), str(doc.relative_to(REPO)))
    assert not problems, "the docs name code that is not in the package:\n" + "\n".join(problems)


def test_a_removed_name_is_reported():
    text = (
        "Call `host.decide` with `decide(strategy, batch, step, seed=0)`, then `Strategy.bind_domains`.\n"
        "Gone: `host.decide_everything`, `Strategy.bind_nothing`, `vanished_helper(x)`,\n"
        "`decide(..., host_settings=...)` and `dataflex_callbacks.host.no_such_name`.\n"
        "Not ours: `trl.GRPOTrainer`, `mix.domains`, `torch.topk`, `dataflex run`, `strategy.py`, `max(a, b)`.\n"
        "```python\nnot_checked_in_a_fence(x)\n```\n"
    )
    problems = problems_in(text, "synthetic.md")
    assert [problem.split(": ", 2)[1] for problem in problems] == [
        "`host.decide_everything`",
        "`Strategy.bind_nothing`",
        "`vanished_helper(x)`",
        "`decide(..., host_settings=...)`",
        "`dataflex_callbacks.host.no_such_name`",
    ]
    assert problems[3].endswith("decide(...) has no parameter host_settings")


def test_removing_a_documented_name_fails_the_docs_test(monkeypatch):
    from dataflex_callbacks import Strategy

    doc = REPO / "docs" / "architecture.md"
    assert "`Strategy.check_host`" in doc.read_text(encoding="utf-8")
    monkeypatch.delattr(Strategy, "check_host")
    problems = problems_in(doc.read_text(encoding="utf-8"), "docs/architecture.md")
    assert [problem.split(": ", 2)[1] for problem in problems] == ["`Strategy.check_host`"]


def test_spans_are_read_as_written():
    assert code_spans("a `x.y` b ``z(1)`` c\n```\n`fenced.name`\n```\n`after.fence`") == [
        (1, "x.y"),
        (1, "z(1)"),
        (5, "after.fence"),
    ]
    assert parse_span("decide(..., seed=args.seed, warn=f(a, b=1))").keywords == ["seed", "warn"]
    assert parse_span('compare(..., cost_model="gen_token=1.0,x=2")').keywords == ["cost_model"]
    assert parse_span("sd(d) / sqrt(n)") is None
    assert parse_span("strategy.py") is None
