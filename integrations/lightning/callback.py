"""`DataFlexCallback`: a data strategy for any GRPO-style LightningModule, one callback and one loss call."""

from __future__ import annotations

from typing import Any, Mapping

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn

from dataflex_callbacks import ConfigError, DomainMixingSampler, Strategy, build_strategy

from .binding import BoundStrategy
from .sampler_checks import check_mixing_sampler, find_mixing_sampler


class DataFlexCallback(pl.Callback):
    """Apply a data strategy (selection, reweighting, domain mixing) inside a Lightning ``fit``.

    At fit start the module gets ``pl_module.dataflex`` (a `BoundStrategy`); its
    ``training_step`` calls ``self.dataflex.loss(per_token_loss, rollout_batch)``. Decisions are
    made on the batch gathered from all ranks (identical everywhere), the domain tracker is fed
    once per step, the strategy's metrics are logged as ``dataflex/<name>`` after each batch, and
    the strategy and sampler state travel in Lightning checkpoints.

    Args:
        strategy: a `Strategy`, a preset name, a config dict or a YAML path.
        sampler: a `DomainMixingSampler` built before ``fit`` (``layout="shard"``,
            ``resume="continue"``, ``strategy=`` this strategy); usually leave None and build it
            with ``self.dataflex.sampler(...)`` in ``train_dataloader``.
        attribute: name of the module attribute to set.
        log_prefix: prefix of the logged metric names.
    """

    def __init__(self, strategy: Any = "baseline", *, sampler: DomainMixingSampler | None = None,
                 attribute: str = "dataflex", log_prefix: str = "dataflex/"):
        self.strategy: Strategy = strategy if isinstance(strategy, Strategy) else build_strategy(strategy)
        self.attribute = attribute
        self.log_prefix = log_prefix
        self.trainer: pl.Trainer | None = None
        self.sampler: DomainMixingSampler | None = None
        self.batches_this_epoch = 0
        self._pending_sampler_state: Mapping[str, Any] | None = None
        self._metrics: dict[str, float] | None = None
        if sampler is not None:
            self.register_sampler(sampler)

    # ------------------------------------------------------------ attach / detach

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        handle = getattr(pl_module, self.attribute, None)
        if handle is None:
            handle = BoundStrategy()
            setattr(pl_module, self.attribute, handle)
        elif not isinstance(handle, BoundStrategy):
            raise ConfigError(f"{type(pl_module).__name__}.{self.attribute} is already a {type(handle).__name__}; "
                              f"rename it, or pass DataFlexCallback(attribute='...') to attach the strategy elsewhere")
        self.trainer = trainer
        handle._bind(self)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        handle = getattr(pl_module, self.attribute, None)
        if isinstance(handle, BoundStrategy):
            handle._unbind()
        self.trainer = None

    def register_sampler(self, sampler: DomainMixingSampler) -> None:
        """Make ``sampler`` the one this callback checks, saves and restores (`BoundStrategy.sampler` calls this)."""
        if self.strategy.mix_enabled and sampler.strategy is not self.strategy:
            raise ConfigError("DataFlexCallback(sampler=...) must follow the callback's strategy: build it with "
                              "DomainMixingSampler(..., strategy=callback.strategy), or use self.dataflex.sampler(...)")
        if self._pending_sampler_state is not None:
            sampler.load_state_dict(self._pending_sampler_state)
            self._pending_sampler_state = None
        self.sampler = sampler

    # ------------------------------------------------------------ training hooks

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        found = find_mixing_sampler(trainer.train_dataloader)
        if found is None:
            if self.strategy.mix_enabled:
                rank_zero_warn("dataflex: the strategy mixes domains but the train dataloader has no "
                               "DomainMixingSampler, so its proportions do not reach the data; build one with "
                               "self.dataflex.sampler(dataset, batch_size=B) in train_dataloader()")
            return
        sampler, loader = found
        check_mixing_sampler(sampler, loader.batch_size, self.strategy, trainer.world_size)
        if sampler is not self.sampler:
            if self._pending_sampler_state is not None:
                raise ConfigError("the checkpoint holds DomainMixingSampler state, but the sampler in the dataloader was "
                                  "built outside the callback, after it could be restored; build it with "
                                  "self.dataflex.sampler(...) in train_dataloader() or pass it to DataFlexCallback(sampler=...)")
            self.sampler = sampler

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.batches_this_epoch = 0
        if self.sampler is not None and self.sampler.position >= len(self.sampler):
            # Lightning stops a sized dataloader after len() batches without exhausting the sampler's
            # iterator, so the sampler cannot tell a finished epoch from an interrupted one. A state
            # round trip at a full position closes the epoch: the next iterator starts a fresh one.
            self.sampler.load_state_dict(self.sampler.state_dict())

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        self.batches_this_epoch += 1

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._metrics:
            # Decisions are made on the gathered batch, so every rank logs the same values: no sync needed.
            metrics = {self.log_prefix + name: float(value) for name, value in self._metrics.items()}
            pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1, sync_dist=False)
        self._metrics = None

    def _record(self, metrics: Mapping[str, float]) -> None:
        self._metrics = dict(metrics)

    # ------------------------------------------------------------ checkpoint state

    def state_dict(self) -> dict[str, Any]:
        """Strategy (tracker, mixer, schedule) and sampler stream, as of the last finished batch."""
        sampler_state = None
        if self.sampler is not None:
            sampler_state = self.sampler.state_dict()
            # A prefetching fetcher (unsized loaders) has drawn one batch more than was trained on;
            # the resumed run must see that batch again.
            sampler_state["position"] = min(sampler_state["position"], self.batches_this_epoch * self.sampler.batch_size)
        return {"strategy": self.strategy.state_dict(), "sampler": sampler_state,
                "batches_this_epoch": self.batches_this_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.strategy.load_state_dict(state_dict["strategy"])
        self.batches_this_epoch = int(state_dict.get("batches_this_epoch", 0))
        sampler_state = state_dict.get("sampler")
        if sampler_state is None:
            return
        if self.sampler is not None:
            self.sampler.load_state_dict(sampler_state)
        else:  # the sampler is built later, in train_dataloader(); `register_sampler` restores it
            self._pending_sampler_state = sampler_state
