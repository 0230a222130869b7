"""TRL adapter: data strategies inside ``trl.GRPOTrainer`` and ``trl.RLOOTrainer``.

Two equivalent ways in::

    from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, attach

    trainer = DataFlexGRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=..., strategy="difffilter")
    # or, keeping a stock trainer (GRPOTrainer or RLOOTrainer):
    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
    attach(trainer, "difffilter")

``DataFlexRLOOTrainer`` is the same for ``trl.RLOOTrainer``; `attach` picks the callback for the trainer.
"""

from .attaching import attach
from .callback import DataFlexCallback
from .loss_scaling import SUPPORTED_LOSS_TYPES
from .rloo import DataFlexRLOOCallback, DataFlexRLOOTrainer
from .trainer import DataFlexGRPOTrainer, DataFlexTrainerMixin

__all__ = ["DataFlexCallback", "DataFlexGRPOTrainer", "DataFlexRLOOCallback", "DataFlexRLOOTrainer",
           "DataFlexTrainerMixin", "SUPPORTED_LOSS_TYPES", "attach"]
