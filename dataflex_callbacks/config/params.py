"""Parameter checks shared by every component: each error names the parameter and its valid range."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dataflex_callbacks._plain_values import plain_scalar  # also re-exported: its home before plain_values
from dataflex_callbacks.errors import ParamError


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a float inside the given bounds, else a `ParamError` naming ``name``.

    Accepts Python, numpy and 0-d torch numbers; infinities pass unless a bound excludes them.
    """
    value = plain_scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise ParamError(f"parameter {name!r} must be a number; got {value!r}", name)
    value = float(value)
    if low is not None and (value < low or (low_open and value == low)):
        raise ParamError(f"parameter {name!r} must be {'>' if low_open else '>='} {low}; got {value}", name)
    if high is not None and (value > high or (high_open and value == high)):
        raise ParamError(f"parameter {name!r} must be {'<' if high_open else '<='} {high}; got {value}", name)
    return value


def check_int(name: str, value: Any, *, low: int | None = None) -> int:
    """``value`` as an int ``>= low``, else a `ParamError` naming ``name`` (numpy/torch integers accepted)."""
    value = plain_scalar(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"parameter {name!r} must be an integer; got {value!r}", name)
    if low is not None and value < low:
        raise ParamError(f"parameter {name!r} must be >= {low}; got {value}", name)
    return value


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices``, else a `ParamError` listing them."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ParamError(f"parameter {name!r} must be one of {', '.join(map(repr, choices))}; got {value!r}", name)
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (numpy bools accepted), else a `ParamError` naming ``name``."""
    value = plain_scalar(value)
    if not isinstance(value, bool):
        raise ParamError(f"parameter {name!r} must be true or false; got {value!r}", name)
    return value
