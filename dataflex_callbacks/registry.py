"""Name -> component class registry, so strategies can be written in YAML.

The registry exists only because users name components in configuration files; everything
else in the library is plain classes and functions.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .errors import ConfigError

KINDS = ("scorer", "selector", "reweighter", "mixer", "prerollout")

_REGISTRY: dict[str, dict[str, type]] = {kind: {} for kind in KINDS}
_ALIASES: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}


def register(kind: str, name: str, aliases: tuple[str, ...] = ()) -> Callable[[type], type]:
    """Class decorator: make ``cls`` buildable as ``build_component(kind, name)``."""
    _check_kind(kind)

    def decorate(cls: type) -> type:
        cls.name = name
        _REGISTRY[kind][name] = cls
        for alias in aliases:
            _ALIASES[kind][alias] = name
        return cls

    return decorate


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown component kind {kind!r}; valid kinds: {', '.join(KINDS)}")


def list_components(kind: str, include_aliases: bool = False) -> list[str]:
    """Registered names of one kind (``scorer``, ``selector``, ``reweighter``, ``mixer``, ``prerollout``), sorted."""
    _check_kind(kind)
    _load_builtins()
    names = set(_REGISTRY[kind])
    if include_aliases:
        names |= set(_ALIASES[kind])
    return sorted(names)


def component_class(kind: str, name: str) -> type:
    """The class registered as ``name`` (aliases resolved); unknown names list the valid ones."""
    _check_kind(kind)
    _load_builtins()
    canonical = _ALIASES[kind].get(name, name)
    if canonical not in _REGISTRY[kind]:
        valid = ", ".join(list_components(kind, include_aliases=True))
        raise ConfigError(f"unknown {kind} {name!r}; valid {kind}s: {valid}")
    return _REGISTRY[kind][canonical]


def accepted_params(cls: type) -> list[str]:
    """Keyword parameters a component's constructor accepts."""
    signature = inspect.signature(cls.__init__)
    return [p.name for p in list(signature.parameters.values())[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def build_component(kind: str, name: str, **params: Any):
    """Build a registered component; unknown or invalid parameters are named in the error."""
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
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{kind} {cls.name!r}: {error}") from error


def describe(kind: str, name: str) -> str:
    """First docstring line of a component: what it does, for ``dataflex list``."""
    doc = inspect.getdoc(component_class(kind, name)) or ""
    return doc.splitlines()[0] if doc else ""


def _load_builtins() -> None:
    # Importing the modules runs their @register decorators; done lazily to avoid import cycles.
    from . import mixers, prerollout, reweighters, scorers, selectors  # noqa: F401
