"""How masking a response out of a TRL GRPO loss is made equal to removing it.

The adapter never drops rows physically (every rank must keep the same shapes). A dropped
response gets an all-zero loss mask instead, which removes it from the numerator of every
TRL ``loss_type``. The denominators differ per loss type, and this module says what each one
needs so that the masked loss equals the loss of the physically reduced batch:

===========  =====================================================  ===========================
loss_type    TRL normaliser (one micro-batch of B rows)              fix for K kept rows
===========  =====================================================  ===========================
grpo, sapo   mean over the B rows of each row's token mean           multiply the loss by B / K
luspo        mean over the B rows of each row's token sum            multiply the loss by B / K
dr_grpo      B * max_completion_length                               multiply the loss by B / K
bnpo         number of unmasked tokens in the micro-batch            none (the mask already fixes it)
dapo, cispo, ``num_items_in_batch``: unmasked tokens of the whole        recount kept tokens only
vespo        generation batch, all processes                         (``kept_token_count``)
===========  =====================================================  ===========================

Response and token weights are applied by `scale_gradient`: the per-token log-probabilities
keep their value and their gradient is multiplied by the weight. Every TRL per-token loss
term (the clipped surrogate, the KL penalty, CISPO/VESPO's ``logp`` terms) depends on the
current policy only through these log-probabilities, so the gradient equals the gradient of
the weighted per-token loss for every loss type and any ``beta``; the loss *value* TRL logs
stays unweighted.
"""

from __future__ import annotations

import torch

ROW_COUNT_LOSSES = ("grpo", "sapo", "luspo", "dr_grpo")
"""Loss types whose normaliser counts the rows of the micro-batch."""

TOKEN_COUNT_LOSSES = ("dapo", "cispo", "vespo")
"""Loss types normalised by ``num_items_in_batch`` (tokens of the whole generation batch)."""

SELF_NORMALISED_LOSSES = ("bnpo",)
"""Loss types normalised by the mask itself."""

SUPPORTED_LOSS_TYPES = ROW_COUNT_LOSSES + TOKEN_COUNT_LOSSES + SELF_NORMALISED_LOSSES


def check_loss_type(loss_type: str) -> None:
    """Raise if the adapter does not know how ``loss_type`` normalises (a newer TRL may add some)."""
    if loss_type not in SUPPORTED_LOSS_TYPES:
        raise ValueError(
            f"dataflex: GRPO loss_type={loss_type!r} is not supported by the TRL adapter; supported loss types are "
            f"{list(SUPPORTED_LOSS_TYPES)}. Pick one of them in GRPOConfig(loss_type=...), or open an issue so the "
            "adapter learns how this loss normalises."
        )


def can_drop_rows(strategy) -> bool:
    """True when ``strategy`` can drop whole responses: a row-level ``select`` part, or ``nan_policy="drop"``.

    Only then can a micro-batch keep fewer than its B rows, so only then does `removal_scale`
    differ from 1 (reweighting, mixing, pre-rollout skipping and token-level selection never drop rows).
    """
    select = getattr(strategy, "select", None)
    return (select is not None and not select.token_level) or getattr(strategy, "nan_policy", None) == "drop"


def removal_scale(loss_type: str, keep: torch.Tensor) -> torch.Tensor:
    """Factor that turns the masked micro-batch loss into the loss of the kept rows only.

    Args:
        loss_type: TRL ``GRPOConfig.loss_type``.
        keep: ``(B,)`` bool, the rows of this micro-batch that stay in the loss.

    Returns:
        0-dim float tensor: ``B / K`` for row-counting losses (0 when ``K == 0``), else 1.
    """
    check_loss_type(loss_type)
    if loss_type not in ROW_COUNT_LOSSES:
        return torch.ones((), device=keep.device)
    num_rows = keep.numel()
    num_kept = keep.sum()
    return torch.where(num_kept > 0, num_rows / num_kept.clamp(min=1).float(), torch.zeros((), device=keep.device))


def scale_gradient(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Return ``values`` unchanged in value, with the gradient flowing back through it multiplied by ``weights``.

    Args:
        values: ``(B, T)`` tensor in the autograd graph (per-token log-probabilities).
        weights: ``(B,)`` or ``(B, T)`` non-negative weights, detached.
    """
    if weights.dim() == 1:
        weights = weights.unsqueeze(1)
    weights = weights.to(dtype=values.dtype, device=values.device)
    frozen = values.detach()
    # frozen + w * 0 is bit-identical to values, so every non-linear TRL term sees the same inputs.
    return frozen + weights * (values - frozen)
