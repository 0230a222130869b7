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

Each loss type is one of the core's loss aggregations (declared here, `GRPO_LOSSES`, in the core's terms,
`dataflex_callbacks.host.AGGREGATIONS`), which say what each normaliser needs; a row-normalised
loss is multiplied by `dataflex_callbacks.host.removal_scale` in `DataFlexCallback.compute_loss`.
RLOO's one loss is ``sequence_mean`` (see `rloo`).

Response and token weights are applied by `scale_gradient`: the per-token log-probabilities
keep their value and their gradient is multiplied by the weight. Every TRL per-token loss
term (the clipped surrogate, the KL penalty, CISPO/VESPO's ``logp`` terms) depends on the
current policy only through these log-probabilities, so the gradient equals the gradient of
the weighted per-token loss for every loss type and any ``beta``; the loss *value* TRL logs
stays unweighted.
"""

from __future__ import annotations

import torch

from dataflex_callbacks.host import ROW_NORMALISED, HostLosses

GRPO_LOSSES = HostLosses(
    "TRL GRPOTrainer",
    "loss_type",
    {
        "grpo": "sequence_mean",
        "sapo": "sequence_mean",
        "luspo": "sequence_sum",
        "dr_grpo": "fixed_length",
        "bnpo": "token_mean",
        "dapo": "token_mean_global",
        "cispo": "token_mean_global",
        "vespo": "token_mean_global",
    },
    "GRPOConfig(loss_type=...)",
)
"""TRL ``GRPOConfig.loss_type`` -> the core's loss aggregation, registered with the core
(with the host's declaration, `host.py`): a new TRL loss type is added here."""

LOSS_AGGREGATION = GRPO_LOSSES.kinds
"""TRL ``GRPOConfig.loss_type`` -> the core's loss aggregation (`dataflex_callbacks.host.AGGREGATIONS`)."""

ROW_COUNT_LOSSES = GRPO_LOSSES.names_of(*ROW_NORMALISED)
"""Loss types whose normaliser counts the rows of the micro-batch."""

TOKEN_COUNT_LOSSES = GRPO_LOSSES.names_of("token_mean_global")
"""Loss types normalised by ``num_items_in_batch`` (tokens of the whole generation batch)."""

SELF_NORMALISED_LOSSES = GRPO_LOSSES.names_of("token_mean")
"""Loss types normalised by the mask itself."""

SUPPORTED_LOSS_TYPES = ROW_COUNT_LOSSES + TOKEN_COUNT_LOSSES + SELF_NORMALISED_LOSSES


def check_loss_type(loss_type: str) -> str:
    """The core aggregation of ``loss_type``;
    a `ConfigError` naming the supported ones when the adapter does not know it."""
    return GRPO_LOSSES.aggregation(loss_type)


def can_drop_rows(strategy) -> bool:
    """True when ``strategy`` can drop whole responses: a row-level ``select`` part, or ``nan_policy="drop"``.

    Only then can a micro-batch keep fewer than its B rows, so only then does
    `dataflex_callbacks.host.removal_scale` differ from 1 (reweighting, mixing, pre-rollout
    skipping and token-level selection never drop rows).
    """
    select = getattr(strategy, "select", None)
    return (select is not None and not select.token_level) or getattr(strategy, "nan_policy", None) == "drop"


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
