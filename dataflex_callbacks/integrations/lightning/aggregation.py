"""Reduce a per-token loss to a scalar so that a dropped response counts as if it had been removed.

A Lightning ``training_step`` owns its loss reduction, so the adapter does it: the strategy's
``Decision`` (keep mask, optional token mask, weights) is folded into the per-token loss and the
normaliser counts only what was kept. For every ``loss_type`` below, the result equals the same
reduction applied to the physically reduced batch, with the kept weights multiplied in:

=================  =============================================================  ===========
loss_type          loss over the kept entries                                     used by
=================  =============================================================  ===========
``token_mean``     sum of ``w * loss`` over kept tokens / number of kept tokens    DAPO, BNPO
``sequence_mean``  mean over kept responses of each response's token mean         GRPO
``sequence_sum``   mean over kept responses of each response's token sum          LUSPO-like
``fixed_length``   sum of ``w * loss`` over kept tokens / (kept responses * L)    Dr. GRPO
=================  =============================================================  ===========

Each ``loss_type`` is the core loss aggregation of the same name (`dataflex_callbacks.host.AGGREGATIONS`),
which is also what TRL's ``loss_type`` and verl's ``loss_agg_mode`` map onto; the names are
declared here (`LIGHTNING_LOSSES`, registered with the host in `host.py`).

A response stays in the ``sequence_*`` and ``fixed_length`` normalisers while it keeps at least
one token (token-level selection can empty a response). When nothing is kept the loss is an
exact zero that still backpropagates (zero gradients, never NaN).
"""

from __future__ import annotations

import torch

from dataflex_callbacks import Decision
from dataflex_callbacks.host import HostLosses, aggregate, finish_loss, kept_token_mask

LIGHTNING_LOSSES = HostLosses(
    "Lightning",
    "loss_type",
    {name: name for name in ("token_mean", "sequence_mean", "sequence_sum", "fixed_length")},
    "self.dataflex.loss(..., loss_type=...)",
)
"""Lightning's ``loss_type`` names: the core's own aggregation names (registered with the host, `host.py`)."""

LOSS_AGGREGATION = LIGHTNING_LOSSES.kinds
"""Lightning ``loss_type`` -> the core's loss aggregation (`dataflex_callbacks.host.AGGREGATIONS`)."""

LOSS_TYPES = LIGHTNING_LOSSES.names

__all__ = ["LOSS_TYPES", "check_loss_type", "finish_loss", "kept_token_mask", "loss_sum_and_count"]


def check_loss_type(loss_type: str) -> str:
    """The core aggregation of ``loss_type``; a `ConfigError` naming the valid choices when it is unknown."""
    return LIGHTNING_LOSSES.aggregation(loss_type)


def loss_sum_and_count(
    per_token_loss: torch.Tensor, decision: Decision, mask: torch.Tensor, loss_type: str, max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Numerator and normaliser of the selected, reweighted loss: ``loss = total / count``.

    They are returned separately so that a distributed run can sum ``count`` over ranks first.

    Args:
        per_token_loss: ``(N, L)`` loss of every token (in the autograd graph).
        decision: keep mask, token mask and weights (``(N,)`` or ``(N, L)``) for the ``N`` rows.
        mask: ``(N, L)`` bool, valid completion tokens.
        loss_type: one of `LOSS_TYPES`.
        max_length: ``L`` of ``fixed_length`` (default ``per_token_loss.shape[1]``).

    Returns:
        ``(total, count)``: 0-dim tensors; ``total`` carries the gradient, ``count`` is a float
        without gradient (kept tokens, kept responses, or kept responses times ``max_length``).
    """
    kind = check_loss_type(loss_type)
    return aggregate(
        per_token_loss, kept_token_mask(decision, mask), kind, weights=decision.weights, max_length=max_length
    )
