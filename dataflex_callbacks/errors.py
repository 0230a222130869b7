"""Exceptions raised by dataflex-callbacks; each message names the bad value and the fix."""

from __future__ import annotations

from typing import Any, Iterable, Mapping


class DataFlexError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(DataFlexError, ValueError):
    """A strategy configuration is invalid: unknown name, bad parameter, missing signal."""


class BatchError(DataFlexError, ValueError):
    """A `RolloutBatch` (or its use) is inconsistent: wrong shape, dtype, device, missing field."""


class StateError(DataFlexError, ValueError):
    """A saved state cannot be loaded: not a state dict, missing keys, wrong shapes or types."""


def check_state(state: Any, keys: Iterable[str], what: str) -> Mapping:
    """``state`` if it is a mapping holding every key in ``keys``, else a `StateError` naming what is expected.

    Used by every ``load_state_dict`` so ``None``, a list or a truncated checkpoint fails with one
    line instead of an AttributeError/KeyError deep inside.
    """
    keys = list(keys)
    if not isinstance(state, Mapping):
        raise StateError(f"{what}.load_state_dict expects the dict returned by {what}.state_dict() "
                         f"(keys: {', '.join(keys)}); got {type(state).__name__}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise StateError(f"{what}.load_state_dict: the state lacks key(s) {missing}; it must come from "
                         f"{what}.state_dict() of this library version")
    return state
