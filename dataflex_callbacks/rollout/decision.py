"""`Decision`: what a strategy decided for one batch (keep mask, weights, metrics); hosts fold it into their loss."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Decision:
    """What a strategy decided for one batch; hosts fold it into their loss with `dataflex_callbacks.host`.

    Attributes:
        keep: ``(N,)`` bool, responses that stay in the loss (and its normaliser).
        weights: ``(N,)`` or ``(N, L)`` float >= 0; 0 where dropped; mean 1 over kept entries
            (unless the reweighter says ``normalize: none``).
        token_keep: ``(N, L)`` bool for token-level selection, else None.
        metrics: plain floats for logging (``kept_frac``, ``dropped_all``, ``ess``, ...).
        deferred: names of parts ("select", "reweight") left for `Strategy.apply_policy`.
        step: the step it was decided at, as the host numbers it (what `Strategy.apply_policy` names in a warning).
    """

    keep: torch.Tensor
    weights: torch.Tensor
    token_keep: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    deferred: tuple[str, ...] = ()
    response_weights: torch.Tensor | None = field(default=None, repr=False)
    step: int | None = field(default=None, repr=False)

    def weighted(self, valid_mask: torch.Tensor | None = None) -> bool:
        """Whether some weight differs from the keep mask (1 kept, 0 dropped): a host then weights the gradient;
        otherwise masking alone carries the decision.

        Args:
            valid_mask: ``(N, L)`` bool, the real tokens, for token-level weights: padding is not compared.
        """
        weights = self.weights
        keep = self.keep.to(device=weights.device, dtype=weights.dtype)
        if weights.dim() == 2:
            keep = keep.unsqueeze(1).expand_as(weights)
            if valid_mask is not None:
                weights = torch.where(valid_mask.to(weights.device), weights, keep)
        return bool((weights != keep).any())
