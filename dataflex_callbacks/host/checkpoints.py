"""What every adapter writes into a checkpoint, and how it restores it: one schema, one strictness policy.

The schema is a dict::

    {"strategy": Strategy.state_dict(), "config": the strategy's config as a plain dict, <the host's own parts>}

The host's parts are its prompt stream and the like (TRL: ``sampler``, ``dynamic``; Lightning:
``sampler``, ``batches_this_epoch``; verl: ``rng``). The policy, the same on every host:

- a checkpoint made with a different strategy config is refused (``strict=True``, the default),
  naming what changed and where the host takes ``strict=False`` (restore only the mixing and
  pre-rollout state);
- a file that is not such a dict, or a damaged strategy state, is a `StateError` naming the
  checkpoint; a file holding objects safe loading refuses is a `StateError` naming the way out;
- a checkpoint without a strategy state resumes from a fresh state, with a warning.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from dataflex_callbacks.errors import ConfigError, StateError, user_stacklevel


def checkpoint_state(strategy: Any, **parts: Any) -> dict:
    """The dict an adapter saves: the strategy's state and config (``StrategyConfig.to_dict()``),
    and the host's own ``parts``.

    Plain values only, so the file loads with ``torch.load(weights_only=True)``.
    """
    return {"strategy": strategy.state_dict(), "config": strategy.config.to_dict(), **parts}


def restore_strategy(
    strategy: Any,
    state: Any,
    *,
    source: str,
    strict: bool = True,
    strict_setting: str | None = None,
    writer: str = "the DataFlex adapter",
) -> Mapping:
    """Load a saved `checkpoint_state` into ``strategy``; returns ``state`` for the host's own parts.

    Args:
        strategy: the run's strategy.
        state: what the checkpoint holds.
        source: the checkpoint, as the messages name it (a folder or file).
        strict: refuse a state saved with a different strategy config (`Strategy.load_state_dict`).
        strict_setting: where this host takes ``strict=False``, added to the message of a changed
            config (e.g. ``"DataFlexGRPOTrainer(..., strict=False)"``); None when it has none.
        writer: what writes such checkpoints, for the message of a file that is not one.

    Raises:
        StateError: ``state`` is not a dict with a ``strategy`` dict, or that state is damaged.
        ConfigError: the strategy config changed and ``strict`` is set.
    """
    if not isinstance(state, Mapping) or not isinstance(state.get("strategy"), Mapping):
        raise StateError(
            f"dataflex: {source} is not a DataFlex strategy state (no 'strategy' dict in it); "
            f"resume from a checkpoint written by {writer}"
        )
    try:
        strategy.load_state_dict(state["strategy"], strict=strict)
    except (ConfigError, StateError) as error:
        where = ""
        if "strict=False" in str(error):
            where = (
                f" (here: {strict_setting})"
                if strict_setting
                else " (this host has no such setting: resume with the same strategy config)"
            )
        raise type(error)(f"dataflex: cannot resume from {source}: {error}{where}") from error
    return state


def read_state_file(
    folder: str, name: str, *, weights_only: bool = True, saved_by: str = "the DataFlex adapter"
) -> Any:
    """The state file ``name`` of a checkpoint folder, read with torch's safe loading;
    None (with a warning) without one.

    Args:
        folder: the checkpoint folder.
        name: the adapter's state file name in it.
        weights_only: ``torch.load``'s safe loading (default); False reads a trusted file written by
            an older version that stored numpy values.
        saved_by: what writes the file, for the warning of a folder without one.

    Raises:
        StateError: the file holds objects safe loading refuses.
    """
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        warnings.warn(
            f"dataflex: checkpoint {folder} has no {name} (saved without {saved_by}?); the strategy "
            "starts from a fresh state.",
            stacklevel=user_stacklevel(),
        )
        return None
    return load_state_file(path, weights_only)


def load_state_file(path: str, weights_only: bool = True) -> Any:
    """Read a saved state with torch's safe loading; a clear error when it holds anything else."""
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except pickle.UnpicklingError as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise StateError(
            f"dataflex: {path} holds objects that safe loading (torch.load weights_only=True) refuses ({reason}); "
            "it was written by an older dataflex-callbacks. If you trust the file, restore it once with "
            "callback.load_state(checkpoint_folder, weights_only=False) and save a new checkpoint."
        ) from error
