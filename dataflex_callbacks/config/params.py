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
    finite: bool = False,
) -> float:
    """``value`` as a float inside the given bounds, else a `ParamError` naming ``name``.

    Accepts Python, numpy and 0-d torch numbers; NaN never passes. Infinities pass unless a bound
    excludes them or ``finite`` is set (a weight, a count or a threshold, where ``.inf`` means no value).
    """
    value = plain_scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise ParamError(f"parameter {name!r} must be a number; got {value!r}", name)
    value = float(value)
    if finite and math.isinf(value):
        bounds = " ".join(
            part
            for part in (
                "" if low is None else f"{'>' if low_open else '>='} {low}",
                "" if high is None else f"{'<' if high_open else '<='} {high}",
            )
            if part
        )
        raise ParamError(
            f"parameter {name!r} must be a finite number{' ' + bounds if bounds else ''}; got {value}: "
            "an infinite value has no meaning here. Give a finite one",
            name,
        )
    if low is not None and (value < low or (low_open and value == low)):
        raise ParamError(f"parameter {name!r} must be {'>' if low_open else '>='} {low}; got {value}", name)
    if high is not None and (value > high or (high_open and value == high)):
        raise ParamError(f"parameter {name!r} must be {'<' if high_open else '<='} {high}; got {value}", name)
    return value


def check_bound(name: str, value: Any, *, upper: bool) -> float:
    """``value`` as one end of a range, infinite on its own side for no bound; else a `ParamError` naming ``name``.

    A lower end may be ``-inf`` and an upper end ``inf`` (the ``diffband`` preset keeps every variance
    above 0); the opposite infinity would leave the range empty, and NaN is never a bound.
    """
    value = check_number(name, value)
    unbounded = math.inf if upper else -math.inf
    if math.isinf(value) and value != unbounded:
        side = "an upper" if upper else "a lower"
        raise ParamError(
            f"parameter {name!r} is {side} end of a range: a finite number, or {unbounded} for no bound; got "
            f"{value}, which leaves the range empty. Give a finite value",
            name,
        )
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
