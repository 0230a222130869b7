"""Lightning adapter: data strategies in your own GRPO-style ``LightningModule``.

One callback, one line in ``training_step``::

    from dataflex_callbacks import RolloutBatch
    from dataflex_callbacks.integrations.lightning import DataFlexCallback

    class GRPOModule(L.LightningModule):
        def training_step(self, batch, batch_idx):
            ...  # generate, reward, group advantages, per-token clipped loss (N, L)
            rollout = RolloutBatch(rewards, group_ids=group_ids, completion_mask=mask, advantages=advantages,
                                   domains=domains)
            return self.dataflex.loss(per_token_loss, rollout, loss_type="sequence_mean")

        def train_dataloader(self):  # needed for mixing and pre-rollout skipping; fine for any strategy
            sampler = self.dataflex.sampler(self.dataset, batch_size=8)
            return DataLoader(self.dataset, batch_size=8, sampler=sampler, collate_fn=list)

    trainer = L.Trainer(callbacks=[DataFlexCallback("difffilter")])

In a ``LightningDataModule``, ``build_sampler(self.trainer, dataset, batch_size=8)`` builds the same sampler.
"""

from . import host as host  # registers Lightning as a host
from .aggregation import LOSS_TYPES
from .binding import BoundStrategy
from .callback import DataFlexCallback, build_sampler
from .sampling import ShardedSampler

__all__ = ["BoundStrategy", "DataFlexCallback", "LOSS_TYPES", "ShardedSampler", "build_sampler"]
