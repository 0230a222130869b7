"""Name -> component class registry, so strategies can be written in YAML.

The registry exists only because users name components in configuration files; everything
else in the library is plain classes and functions. A config names a component by its
registered name (``reward``) or by the import path of its class (``my_pkg.my_mod:MyScorer`` or
``my_pkg.my_mod.MyScorer``). This module imports no component module: the built-in ones register
themselves when ``dataflex_callbacks`` is imported, and each kind's base class declares itself
with `register_base`, so an imported class can be checked against it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from dataflex_callbacks.errors import ArgumentError, ConfigError, ParamError

KINDS = ("scorer", "selector", "reweighter", "mixer", "pre_select", "allocation")

_REGISTRY: dict[str, dict[str, type[Component]]] = {kind: {} for kind in KINDS}
_ALIASES: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
_BASES: dict[str, type[Component]] = {}
_ComponentClass = TypeVar("_ComponentClass", bound="type[Component]")


def register(
    kind: str, name: str, aliases: tuple[str, ...] = (), *, override: bool = False
) -> Callable[[_ComponentClass], _ComponentClass]:
    """Class decorator: make ``cls`` buildable as ``build_component(kind, name)`` and nameable in configs.

    ``cls`` must subclass the kind's base class (`Scorer`, `Selector`, `Reweighter`, `Mixer`,
    `PreSelectFilter`, `Allocator`), as a class named by import path must. A name (or alias) already taken by
    another class of that kind is refused with a `ConfigError`: registering replaces the class for
    the whole process, built-ins included. Pass ``override=True`` to replace it on purpose: the class
    it replaces is then replaced under every name and alias it had (``reward`` and ``reward_difficulty``
    are one component). Registering the same class again (a reloaded module) is allowed.
    """
    kind = _check_kind(kind)
    where = f"register({kind!r}, {name!r})"
    _check_name(name, "name", where)
    if isinstance(aliases, str) or not isinstance(aliases, (tuple, list)):
        raise ArgumentError(
            f"{where}: argument 'aliases' must be a tuple of names; got {aliases!r}. "
            f"Write aliases=({aliases!r},) for one alias"
        )
    for alias in aliases:
        _check_name(alias, "aliases", where)

    def decorate(cls: _ComponentClass) -> _ComponentClass:
        if not override:
            for taken in (name, *aliases):
                _check_free(kind, taken, cls)
        _check_component_class(kind, f"{kind} {name!r}", cls)
        registry, alias_of = _REGISTRY[kind], _ALIASES[kind]
        replaced = {registry.get(alias_of.get(taken, taken)) for taken in (name, *aliases)} - {None, cls}
        for held, holder in list(registry.items()):
            if holder in replaced:  # the replaced class's other names and aliases now mean this class too
                registry[held] = cls
        cls.name = name
        registry[name] = cls
        alias_of.pop(name, None)  # with override=True a name that was an alias now means this class
        for alias in aliases:
            alias_of[alias] = name
        return cls

    return decorate


def _check_name(name: Any, argument: str, where: str) -> None:
    """Refuse a component name that is not a non-empty string (`list_components` sorts them; configs spell them)."""
    if not isinstance(name, str) or not name:
        raise ArgumentError(
            f"{where}: argument {argument!r} must be a non-empty string, the name configs use; got "
            f"{name!r}. Write the name in quotes, e.g. register('scorer', 'my_scorer')"
        )


def _check_component_class(kind: str, what: str, found: Any) -> None:
    """Refuse ``found`` unless it is a class subclassing the kind's base class (`register_base`); ``what`` names it."""
    base = _BASES.get(kind)
    if inspect.isclass(found) and (base is None or issubclass(found, base)):
        return
    if base is None:
        raise ArgumentError(f"{what}: a {kind} is a class; got a {type(found).__name__}")
    shown = f"class {found.__name__}" if inspect.isclass(found) else f"a {type(found).__name__}"
    other = next((k for k, b in _BASES.items() if inspect.isclass(found) and issubclass(found, b)), None)
    hint = f" (it is a {other}: name it under the {other} key)" if other else ""
    raise ConfigError(
        f"{what} is {shown}, not a subclass of dataflex_callbacks.{base.__name__}{hint}; "
        f"a {kind} is written as 'class MyClass(dataflex_callbacks.{base.__name__})'"
    )


def _check_free(kind: str, name: str, cls: type[Component]) -> None:
    """Refuse ``name`` when another class of ``kind`` holds it (as a name or an alias);
    the same class may register again."""
    holder = _REGISTRY[kind].get(_ALIASES[kind].get(name, name))
    if holder is None or import_path(holder) == import_path(cls):
        return
    as_alias = f" (an alias of {_ALIASES[kind][name]!r})" if name in _ALIASES[kind] else ""
    raise ConfigError(
        f"{kind} name {name!r}{as_alias} is already registered to {import_path(holder)}; registering "
        f"{import_path(cls)} under it would replace it for the whole process. Choose another name, or "
        f"pass register({kind!r}, {name!r}, override=True) to replace it on purpose"
    )


def register_base(kind: str) -> Callable[[_ComponentClass], _ComponentClass]:
    """Class decorator for the base class of a kind: a class named by import path must subclass it."""
    kind = _check_kind(kind)

    def decorate(cls: _ComponentClass) -> _ComponentClass:
        _BASES[kind] = cls
        return cls

    return decorate


def import_path(cls: type) -> str:
    """``module:QualName`` of a class: how a config names a component that is not registered."""
    return f"{cls.__module__}:{cls.__qualname__}"


class Component:
    """Root of the component base classes: a subclass is named by its import path until `register` names it."""

    name = "component"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = import_path(cls)

    def state_dict(self) -> dict:
        """The component's state across steps; ``{}`` for one without state (a public no-op, as in Lightning's
        ``Callback``). A component that learns across steps overrides both methods, so that a resumed run
        continues exactly; `Strategy.state_dict` saves every component's."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict` output; a component without state has nothing to restore."""


def _check_kind(kind: str) -> str:
    """``kind`` itself when it is one of `KINDS`, else a `ConfigError` listing the valid kinds."""
    if kind not in KINDS:
        raise ConfigError(f"unknown component kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    return kind


def list_components(kind: str, include_aliases: bool = False) -> list[str]:
    """Registered names of one kind (``scorer``, ``selector``, ``reweighter``, ``mixer``, ``pre_select``,
    ``allocation``), sorted."""
    kind = _check_kind(kind)
    names = set(_REGISTRY[kind])
    if include_aliases:
        names |= set(_ALIASES[kind])
    return sorted(names)


def component_class(kind: str, name: str) -> type[Component]:
    """The class registered as ``name`` (aliases resolved), or imported from the path ``name``.

    A name with a ``:`` or a ``.`` that is not registered is read as ``module:Class`` or
    ``module.Class``; the class must subclass the kind's base class (e.g. `Scorer`). Unknown
    names list the valid ones.
    """
    kind = _check_kind(kind)
    canonical = _ALIASES[kind].get(name, name)
    if canonical in _REGISTRY[kind]:
        return _REGISTRY[kind][canonical]
    if isinstance(name, str) and (":" in name or "." in name):
        return _import_component(kind, name)
    valid = ", ".join(list_components(kind, include_aliases=True))
    raise ConfigError(
        f"unknown {kind} {name!r}; valid {kind}s: {valid}, or the import path of your own class "
        f"('my_pkg.my_module:MyClass')"
    )


def import_module_from_cwd(module_name: str) -> ModuleType:
    """Import `module_name` from sys.path or, as a user running a script there expects, the current directory.

    A console script such as `dataflex` starts with its own bin folder on sys.path, not the current
    directory, so `my_methods:GroupCenteredReward` next to the user's YAML would not import without
    `PYTHONPATH=.`; the current directory is added to sys.path (once) when it is missing.
    """
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.append(here)  # after sys.path: an installed package keeps its name
        importlib.invalidate_caches()
    return importlib.import_module(module_name)


def import_object(path: str, *, what: str, error: type, form: str, missing: str, allow_dot: bool = True) -> Any:
    """The object at ``module:name`` (or ``module.name`` when `allow_dot`), imported as `import_module_from_cwd` does.

    Every failure raises `error` with one message that starts with `what` (how the user wrote it, e.g.
    ``"--reward 'x:y'"``): a path not of the `form`, a module that is not found (then `missing` names the
    fix), a module that fails to import, a missing attribute.
    """
    if ":" in path or not allow_dot:
        module_name, _, attribute = path.partition(":")
    else:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise error(f"{what} is not an import path; write it as {form}")
    try:
        module = import_module_from_cwd(module_name)
    except ModuleNotFoundError as failure:
        if failure.name is not None and (module_name + ".").startswith(failure.name + "."):
            raise error(
                f"{what}: no module named {failure.name!r} (looked in the current directory and on sys.path); {missing}"
            ) from None
        raise error(f"{what}: importing module {module_name!r} failed: {failure}") from failure
    except Exception as failure:
        raise error(
            f"{what}: importing module {module_name!r} failed: {type(failure).__name__}: {failure}"
        ) from failure
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise error(
                f"{what}: module {module_name!r} has no attribute {attribute!r}; check the name after the "
                f"module path ({form})"
            )
        found = getattr(found, part)
    return found


def _import_component(kind: str, path: str) -> type[Component]:
    """The class at ``module:Class`` or ``module.Class``, checked to subclass the kind's base class."""
    found = import_object(
        path,
        what=f"{kind} {path!r}",
        error=ConfigError,
        form="'my_pkg.my_module:MyClass'",
        missing="install the package that holds it, run from the folder that holds it, or put "
        f"its folder on PYTHONPATH (registered {kind}s: {', '.join(list_components(kind))})",
    )
    if kind not in _BASES:
        raise ConfigError(
            f"{kind} {path!r}: a {kind} cannot be named by import path; register it with "
            f"@register({kind!r}, 'my_name') and name it 'my_name'"
        )
    _check_component_class(kind, f"{kind} {path!r}", found)
    return found


def accepted_params(cls: type[Component]) -> list[str]:
    """Keyword parameters a component's constructor accepts."""
    signature = inspect.signature(cls.__init__)
    return [
        p.name for p in list(signature.parameters.values())[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


@dataclass(frozen=True)
class ParamInfo:
    """One constructor parameter of a component: what a config's ``params`` may set.

    ``default`` is the constructor's default (`ParamInfo.REQUIRED` when it has none); ``help``
    is the parameter's entry in the ``Args:`` section of the class docstring ("" when undocumented).
    """

    REQUIRED = inspect.Parameter.empty

    name: str
    default: Any
    help: str

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


_ARG_ENTRY = re.compile(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")


def docstring_args(doc: str | None) -> dict[str, str]:
    """``{parameter: help}`` from the Google-style ``Args:`` section of a docstring (continuation lines joined)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        return {}
    found: dict[str, str] = {}
    entry_indent, name = None, None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:  # the section ends at the next unindented line
            break
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_ENTRY.fullmatch(line.strip())
        if indent == entry_indent and match:
            name = match.group(1)
            found[name] = match.group(2).strip()
        elif name is not None and indent > entry_indent:
            found[name] = f"{found[name]} {line.strip()}".strip()
    return found


def component_params(kind: str, name: str) -> list[ParamInfo]:
    """The parameters a config's ``params`` may give component ``name``, in constructor order.

    Each default comes from the constructor's signature, each help text from the ``Args:``
    section of the class docstring, or of the nearest base class that documents the parameter
    (so a subclass need not repeat an inherited one).
    """
    cls = component_class(kind, name)
    signature = inspect.signature(cls.__init__)
    docs = [docstring_args(klass.__dict__.get("__doc__")) for klass in cls.__mro__]

    def help_of(param: str) -> str:
        return next((doc[param] for doc in docs if param in doc), "")

    return [ParamInfo(param, signature.parameters[param].default, help_of(param)) for param in accepted_params(cls)]


def build_component(kind: str, name: str, **params: Any) -> Any:
    """Build a registered (or import-path) component; unknown or invalid parameters are named in the error.

    Returns an instance of the kind's base class (`Scorer`, `Selector`, ...); the kind is a string
    known at run time, so the return type is left to the caller.
    """
    cls = component_class(kind, name)
    accepted = accepted_params(cls)
    unknown = [key for key in params if key not in accepted]
    if unknown:
        raise ConfigError(
            f"{kind} {cls.name!r} got unknown parameter(s) {', '.join(map(repr, unknown))}; "
            f"accepted: {', '.join(accepted) or '(none)'}"
        )
    try:
        return cls(**params)
    except ParamError as error:
        raise ParamError(f"{kind} {cls.name!r}: {error}", error.param) from error
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{kind} {cls.name!r}: {error}") from error


def describe(kind: str, name: str) -> str:
    """First docstring line of a component: what it does, for ``dataflex list``."""
    cls = component_class(kind, name)
    doc = inspect.getdoc(cls) or ""
    line = doc.splitlines()[0] if doc else ""
    paper = cls.__dict__.get("paper")  # a component that names its papers (the allocators) shows them too
    return f"{line} ({paper})" if isinstance(paper, str) and paper else line
