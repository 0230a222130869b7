"""TRL's ``RLOOTrainer`` as a DataFlex host: `DataFlexRLOOCallback` and `DataFlexRLOOTrainer`.

RLOOTrainer has GRPOTrainer's structure (``_calculate_rewards``, ``_generate_and_score_completions``,
``_compute_loss``, ``_get_train_sampler``), so `DataFlexCallback` and `DataFlexTrainerMixin` do the
work; this module holds only what RLOO's loss does differently:

- its one loss (no ``loss_type``) is the clipped surrogate on each row's *sequence* log-ratio,
  averaged over the micro-batch's B rows: a row-normalised loss (``"sequence_mean"`` of
  `dataflex_callbacks.host.AGGREGATIONS`), so K kept rows take the B/K rescale;
- that loss reads no per-token loss mask (GRPO's ``tool_mask``), so a dropped row leaves it through
  a zero advantage: its term and its gradient are exactly zero;
- response and token weights scale the gradient of the per-token log-probabilities, as in GRPO;
  for RLOO's sequence-level ratio this weights each token's share of the sequence gradient (token
  selection, e.g. ``entropy_top``, trains on the kept tokens' gradient while the ratio still sums
  every token, as TRL computes it).

The strategy selects on the rewards of ``_calculate_rewards`` (``selection_reward``), before RLOO
subtracts its KL penalty (``beta``); the advantages it sees are RLOO's leave-one-out advantages.
"""

from __future__ import annotations

import torch
from trl import RLOOTrainer

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import HostLosses

from .callback import DataFlexCallback
from .trainer import DataFlexTrainerMixin

# TRL's RLOOTrainer has one loss and no setting naming it: the mean over the micro-batch's rows.
RLOO_LOSSES = HostLosses("TRL RLOOTrainer", "loss", {"rloo": "sequence_mean"}, "RLOOConfig")
ROW_MEAN_AGGREGATION = RLOO_LOSSES.aggregation("rloo")
"""RLOO's loss normaliser as a core aggregation: the mean over the micro-batch's rows."""


class DataFlexRLOOCallback(DataFlexCallback):
    """Apply a data strategy to a TRL ``RLOOTrainer``; same arguments as `DataFlexCallback`.

    Use it through `attach(trainer, strategy)` or `DataFlexRLOOTrainer(..., strategy=...)`.
    """

    host_class = RLOOTrainer
    trainer_name = "DataFlexRLOOTrainer"
    exact_removal_advice = (
        "RLOOTrainer's one loss always averages over rows; for exact equivalence turn the MoE aux "
        "loss off with RLOOConfig(router_aux_loss_coef=0.0)."
    )
    supports_dynamic_sampling = False
    supports_fewer_groups = False

    def loss_aggregation(self, trainer) -> str:
        """``"sequence_mean"``: the one RLOO loss the adapter knows; a ``loss_type`` on the trainer is refused."""
        loss_type = getattr(trainer, "loss_type", None)  # TRL's RLOOTrainer has one loss and no loss_type
        if loss_type is not None:
            raise ConfigError(
                f"dataflex: RLOOTrainer loss_type={loss_type!r} is not supported by the RLOO adapter, which knows "
                "TRL's one RLOO loss (the clipped sequence-level surrogate averaged over rows, no loss_type setting). "
                "Use that loss, or open an issue so the adapter learns how this loss normalises."
            )
        return ROW_MEAN_AGGREGATION

    def loss_name(self, trainer) -> str:
        """``"RLOOTrainer's loss"``: RLOO has no loss setting to name."""
        return "RLOOTrainer's loss"

    def remove_dropped(self, output: dict, keep: torch.Tensor, token_keep: torch.Tensor) -> None:
        """As `DataFlexCallback.remove_dropped`, and a dropped row gets advantage 0 (RLOO's loss ignores the mask).

        ``advantages`` ``(B,)`` keeps its exact values on kept rows. The mask is still written: the
        adapter's policy weights read it inside the loss.
        """
        super().remove_dropped(output, keep, token_keep)
        advantages = output["advantages"]
        output["advantages"] = torch.where(keep, advantages, torch.zeros_like(advantages))


class DataFlexRLOOTrainer(DataFlexTrainerMixin, RLOOTrainer):
    """A ``trl.RLOOTrainer`` that applies a DataFlex strategy; every RLOOTrainer argument works unchanged.

    The same as a stock ``RLOOTrainer`` followed by ``attach(trainer, strategy, **options)``; the
    callback is ``trainer.dataflex``. Arguments: `DataFlexTrainerMixin`'s (``strategy`` may be left
    out when a `DataFlexRLOOCallback` is passed in ``callbacks=[...]``), the rest go to ``trl.RLOOTrainer``.
    """

    callback_class = DataFlexRLOOCallback
