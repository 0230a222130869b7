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

A response stays in the ``sequence_*`` and ``fixed_length`` normalisers while it keeps at least
one token (token-level selection can empty a response). When nothing is kept the loss is an
exact zero that still backpropagates (zero gradients, never NaN).
"""

from __future__ import annotations

import torch

from dataflex_callbacks import BatchError, Decision

LOSS_TYPES = ("token_mean", "sequence_mean", "sequence_sum", "fixed_length")


def check_loss_type(loss_type: str) -> None:
    """Raise naming the valid choices when ``loss_type`` is unknown."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"dataflex: loss_type={loss_type!r} is not supported; choose one of {list(LOSS_TYPES)}")


def kept_token_mask(decision: Decision, mask: torch.Tensor) -> torch.Tensor:
    """``(N, L)`` bool: tokens that stay in the loss (valid, in a kept response, not dropped by a token selector).

    Args:
        decision: the strategy's decision for these ``N`` responses.
        mask: ``(N, L)`` bool, valid completion tokens.
    """
    kept = mask & decision.keep.to(mask.device).unsqueeze(1)
    if decision.token_keep is not None:
        kept = kept & decision.token_keep.to(mask.device)
    return kept


def loss_sum_and_count(per_token_loss: torch.Tensor, decision: Decision, mask: torch.Tensor, loss_type: str,
                       max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
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
    check_loss_type(loss_type)
    if per_token_loss.dim() != 2 or per_token_loss.shape != mask.shape:
        raise BatchError(f"per_token_loss must have shape (N, L) = {tuple(mask.shape)} like the completion mask; "
                         f"got {tuple(per_token_loss.shape)}")
    kept = kept_token_mask(decision, mask)
    weights = decision.weights.to(device=per_token_loss.device, dtype=per_token_loss.dtype)
    if weights.dim() == 1:
        weights = weights.unsqueeze(1)
    # where(), not a product: padded or dropped positions may hold inf/NaN (e.g. log-prob of padding).
    terms = torch.where(kept, per_token_loss * weights, torch.zeros_like(per_token_loss))
    tokens_per_row = kept.sum(dim=1)
    rows = (tokens_per_row > 0).sum().to(per_token_loss.dtype)
    if loss_type == "token_mean":
        return terms.sum(), kept.sum().to(per_token_loss.dtype)
    if loss_type == "sequence_mean":
        return (terms.sum(dim=1) / tokens_per_row.clamp(min=1).to(per_token_loss.dtype)).sum(), rows
    if loss_type == "sequence_sum":
        return terms.sum(), rows
    length = per_token_loss.shape[1] if max_length is None else int(max_length)
    return terms.sum(), rows * length


def finish_loss(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``total / count``, and an exact zero (still in the graph) when nothing was kept."""
    return total / count.clamp(min=1)
