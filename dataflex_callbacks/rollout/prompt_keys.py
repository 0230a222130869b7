"""Prompt keys: how a dataset row names its prompt, in the one form the sampler, the history and the adapters share.

A `RolloutBatch` carries them in ``prompt_keys``; the pre-rollout filter's `PromptHistory` and the
`DomainMixingSampler` look prompts up by them, so every side must turn a row into a key alike.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from dataflex_callbacks._plain_values import plain_scalar

KEY_COLUMNS = ("prompt_key", "prompt")  # where a row's prompt key is read from, in order


def hashable_key(value: object) -> Hashable:
    """A prompt key usable in a dict: strings and ints as they are, anything else as canonical JSON.

    A numpy scalar or 0-d tensor (what a collate function makes of an int column) counts as its
    Python value, so ``np.int64(3)``, ``torch.tensor(3)`` and ``3`` name the same prompt.
    """
    value = plain_scalar(value)
    if isinstance(value, (str, int)):
        return value
    import json

    return json.dumps(value, sort_keys=True, default=str)


def row_prompt_key(row: Any, index: int) -> Hashable:
    """The stable key of one dataset row: its ``prompt_key``, else its ``prompt``, else its index.

    Samplers and host adapters both use this rule, so the history they share agrees on keys.
    """
    for column in KEY_COLUMNS:
        if hasattr(row, "keys") and column in row:
            return hashable_key(row[column])
    return index
