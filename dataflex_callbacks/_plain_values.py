"""Configuration values as plain Python: what checkpoints save and JSON writes.

Users pass numpy and 0-d torch numbers, tuples and OmegaConf nodes; the config step and the
parameter checks turn them into plain ints, floats, bools, strings, lists and dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def plain(value: Any) -> Any:
    """``value`` as plain Python containers and scalars (OmegaConf nodes, tuples, numpy/torch numbers converted).

    The resolved config is saved in checkpoints; only plain values load under
    ``torch.load(weights_only=True)`` and serialise to JSON.
    """
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return plain_scalar(value)


def plain_scalar(value: Any) -> Any:
    """A 0-d numpy/torch number as the Python int/float/bool it holds; any other value unchanged.

    Users pass ``np.float64(0.3)`` or ``torch.tensor(0.3)`` for numbers; checks and saved
    state want plain Python scalars (``torch.load(weights_only=True)`` refuses numpy scalars).
    """
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, str):  # numpy.str_ and other str subclasses
        return str(value)
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        try:
            item = value.item()
        except (TypeError, ValueError, RuntimeError):
            return value
        if isinstance(item, (bool, int, float)):
            return item
    return value
