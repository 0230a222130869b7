"""Row payloads of `SignalGroupBuffer`: what a training loop needs back for each rollout row, kept with its groups.

A payload is a tensor ``(N, ...)``, a list of N items, or a dict of those; these functions count,
select, slice, join and copy its rows without a Python loop over tensor rows.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dataflex_callbacks.errors import BatchError


def payload_rows(payload: Any) -> int | None:
    """Rows of a payload: a tensor ``(N, ...)``, a list of N items, or a dict of those (None: no payload)."""
    if payload is None:
        return None
    if isinstance(payload, torch.Tensor):
        return payload.shape[0] if payload.dim() else -1
    if isinstance(payload, (list, tuple)):
        return len(payload)
    if isinstance(payload, Mapping):
        counts = {key: payload_rows(value) for key, value in payload.items()}
        if len(set(counts.values())) > 1:
            raise BatchError(f"the payload's entries must hold one row per rollout; got rows {counts}")
        return next(iter(counts.values()), None)
    raise BatchError(
        f"a payload must be a tensor (N, ...), a list of N items or a dict of those; got {type(payload).__name__}"
    )


def index_payload(payload: Any, rows: torch.Tensor) -> Any:
    """The payload's ``rows (M,)`` (long), in that order."""
    if payload is None:
        return None
    if isinstance(payload, torch.Tensor):
        return payload.index_select(0, rows.to(payload.device))
    if isinstance(payload, Mapping):
        return {key: index_payload(value, rows) for key, value in payload.items()}
    return [payload[i] for i in rows.tolist()]  # a list has no vectorised gather


def slice_payload(payload: Any, rows: slice) -> Any:
    """The payload's consecutive ``rows``."""
    if payload is None:
        return None
    if isinstance(payload, Mapping):
        return {key: slice_payload(value, rows) for key, value in payload.items()}
    return payload[rows]


def concat_payloads(parts: Sequence[Any]) -> Any:
    """The payloads of ``parts`` one after the other (all of one kind, with the same keys and trailing shapes)."""
    first = parts[0]
    if first is None:
        if any(part is not None for part in parts):
            raise BatchError("some rounds were added with a payload and some without; give one every time or never")
        return None
    if isinstance(first, torch.Tensor):
        if not all(isinstance(part, torch.Tensor) for part in parts):
            raise BatchError("the payload changed kind between rounds (a tensor, then something else)")
        shapes = {tuple(part.shape[1:]) for part in parts}
        if len(shapes) > 1:
            raise BatchError(
                f"payload tensors of different rounds have different trailing shapes {sorted(shapes)}; "
                "pad them to one width before add() (e.g. completions to max_new_tokens), or pass a list"
            )
        return torch.cat(list(parts))
    if isinstance(first, Mapping):
        keys = [sorted(part) if isinstance(part, Mapping) else None for part in parts]
        changed = next((k for k in keys if k != keys[0]), keys[0])
        if changed != keys[0]:
            raise BatchError(
                f"the payload's keys changed between rounds: {keys[0]} then {changed}; give the same keys every round"
            )
        return {key: concat_payloads([part[key] for part in parts]) for key in first}
    return [item for part in parts for item in part]


def compact_copy(value: Any) -> Any:
    """A deep copy in which every tensor is a compact copy of its own entries (``deepcopy`` would copy a
    view's whole storage: a row of a round's batch would bring the round along)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {key: compact_copy(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(compact_copy(item) for item in value)
    return copy.deepcopy(value)
