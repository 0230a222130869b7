"""DataFlex strategies inside verl's own v1 trainer (verl 0.9.1).

Installing this package registers the ``verl.plugins`` entry point ``dataflex``; ``import verl``
then makes ``trainer.v1.trainer_mode=dataflex_sync`` (and ``dataflex_mix_sync``, DataFlex-RL's name for it
in mix configs) available. The strategy comes from the top-level ``dataflex:`` block of the verl config.
See ``docs/verl.md``.

Modules: ``plugin`` (registration), ``config`` (the ``dataflex:`` block), ``fields`` (verl batch
fields <-> `RolloutBatch` / loss weights; needs only torch), ``trainer`` (the trainer subclass;
needs verl with its ``verl-core`` extras).
"""

from . import host as host  # registers verl's trainer modes as hosts (without importing verl)
from .config import strategy_from_verl_config
from .fields import loss_fields_from_decision, rollout_batch_from_fields

__all__ = ["loss_fields_from_decision", "rollout_batch_from_fields", "strategy_from_verl_config"]
