"""A reward function's return, checked once for every host that calls the user's rewards itself.

TRL turns a wrong return into a raw `TypeError` or `ValueError` deep in its scoring; a host that calls the
rewards (the in-process async worker, `dataflex run`'s evaluation and scored rewards) refuses it first, in
one message naming the reward, what it returned and the form it must take.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from dataflex_callbacks.errors import InputError

EXPECTED_FORM = "a list of floats or None, one per completion"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def reward_values(
    values: Any, name: str, count: int, error: type[InputError] = InputError, where: str = ""
) -> list[float]:
    """``values`` returned by reward ``name`` for ``count`` completions, as floats (None and NaN as NaN).

    Args:
        values: what the reward returned: a list, tuple, array or tensor of numbers or None.
        name: the reward's name, as the message shows it.
        count: completions it was given.
        error: the `InputError` subclass raised (a host's own, e.g. the recipes' `RewardOutputError`).
        where: the message's prefix naming the caller.

    Raises:
        error: for None, a bare number, text, a mapping, a wrong length, or an element that is not a number.
    """
    if hasattr(values, "tolist"):  # numpy arrays and torch tensors (a 0-d one becomes a bare number)
        values = values.tolist()
    if values is None or isinstance(values, (str, bytes, dict, numbers.Number)) or not hasattr(values, "__len__"):
        raise error(
            f"{where}reward {name!r} returned {_shown(values)} ({type(values).__name__}) for {count} completions; "
            f"return {EXPECTED_FORM} (None: this completion is not scored)"
        )
    values = list(values)
    if len(values) != count:
        raise error(
            f"{where}reward {name!r} returned {len(values)} value(s) for {count} completions; return {EXPECTED_FORM}"
        )
    out = []
    for index, value in enumerate(values):
        number = math.nan if value is None else None
        if value is not None and not isinstance(value, (str, bytes)):  # float("1") would read text as a number
            try:
                number = float(value)  # int, bool, float, numpy or torch scalars; NaN stays NaN
            except (TypeError, ValueError):
                pass
        if number is None:
            raise error(
                f"{where}reward {name!r} returned {_shown(value)} ({type(value).__name__}) for completion {index} "
                f"of {count} (all: {_shown(values)}); return {EXPECTED_FORM}"
            )
        out.append(number)
    return out
