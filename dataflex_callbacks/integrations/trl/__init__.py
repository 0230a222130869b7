"""TRL adapter: data strategies inside ``trl.GRPOTrainer`` and ``trl.RLOOTrainer``.

Two equivalent ways in::

    from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, attach

    trainer = DataFlexGRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=..., strategy="difffilter")
    # or, keeping a stock trainer (GRPOTrainer or RLOOTrainer):
    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
    attach(trainer, "difffilter")

``DataFlexRLOOTrainer`` is the same for ``trl.RLOOTrainer``, ``DataFlexAsyncGRPOTrainer`` for
``trl.experimental.async_grpo.AsyncGRPOTrainer`` (`async_grpo`; imported on first use, since TRL
warns on experimental imports); `attach` picks the callback for the trainer.
"""

from . import host as host  # registers GRPOTrainer, RLOOTrainer and AsyncGRPOTrainer as hosts
from .attaching import attach
from .callback import DataFlexCallback
from .loss_scaling import SUPPORTED_LOSS_TYPES
from .rloo import DataFlexRLOOCallback, DataFlexRLOOTrainer
from .trainer import DataFlexGRPOTrainer, DataFlexTrainerMixin

__all__ = [
    "DataFlexAsyncCallback",
    "DataFlexAsyncGRPOTrainer",
    "DataFlexCallback",
    "DataFlexGRPOTrainer",
    "DataFlexRLOOCallback",
    "DataFlexRLOOTrainer",
    "DataFlexTrainerMixin",
    "SUPPORTED_LOSS_TYPES",
    "attach",
]


def __getattr__(name: str):
    if name in ("DataFlexAsyncCallback", "DataFlexAsyncGRPOTrainer"):
        from . import async_grpo

        return getattr(async_grpo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
