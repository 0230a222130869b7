"""TRL adapter: data strategies inside ``trl.GRPOTrainer``.

Two equivalent ways in::

    from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, attach

    trainer = DataFlexGRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=..., strategy="difffilter")
    # or, keeping a stock trainer:
    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
    attach(trainer, "difffilter")
"""

from .callback import DataFlexCallback, attach
from .loss_scaling import SUPPORTED_LOSS_TYPES
from .trainer import DataFlexGRPOTrainer

__all__ = ["DataFlexCallback", "DataFlexGRPOTrainer", "SUPPORTED_LOSS_TYPES", "attach"]
