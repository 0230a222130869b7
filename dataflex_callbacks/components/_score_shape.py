"""The shape check of the scores a selector or reweighter receives from its scorer."""

from __future__ import annotations

import torch

from dataflex_callbacks.errors import BatchError


def check_score_shape(kind: str, name: str, granularity: str, scores: torch.Tensor) -> None:
    """Raise `BatchError` unless ``scores`` is ``(N,)`` for response-level or ``(N, L)`` for token-level components."""
    want_dim = 2 if granularity == "token" else 1
    if scores.dim() != want_dim:
        shape = "(N, L)" if want_dim == 2 else "(N,)"
        raise BatchError(
            f"{kind} {name!r} works on {granularity}-level scores {shape}; got shape "
            f"{tuple(scores.shape)}: pair it with a {granularity}-level scorer"
        )
