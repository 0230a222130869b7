"""`DataFlexCallback`: a data strategy for any GRPO-style LightningModule, one callback and one loss call."""

from __future__ import annotations

from typing import Any, Mapping

import lightning.pytorch as pl

from dataflex_callbacks import ConfigError, DomainMixingSampler, Strategy, build_strategy

from .binding import BoundStrategy
from .sampler_checks import FIX, check_distributed_data, check_mixing_sampler, find_mixing_sampler
from .sampling import make_sampler, sampler_keys
from .step_metrics import COUNTERS, StepMetrics


class DataFlexCallback(pl.Callback):
    """Apply a data strategy (selection, reweighting, domain mixing) inside a Lightning ``fit``.

    At fit start the module gets ``pl_module.dataflex`` (a `BoundStrategy`); its
    ``training_step`` calls ``self.dataflex.loss(per_token_loss, rollout_batch)``. Decisions are
    made on the batch gathered from all ranks (identical everywhere), the domain tracker is fed
    once per step, the strategy's metrics are logged as ``dataflex/<name>`` when the optimizer
    steps (aggregated over gradient-accumulation micro-batches, per step and per epoch), and the
    strategy and sampler state travel in Lightning checkpoints.

    At fit start it refuses set-ups that would silently do nothing or duplicate data: a ``mix`` or
    ``pre_select`` strategy without the prompt sampler, and, under DDP, a train DataLoader whose
    sampler is not sharded by rank. After ``fit`` (also one stopped by an exception) the module
    is unbound.

    Args:
        strategy: a `Strategy`, a preset name, a config dict or a YAML path.
        sampler: a `DomainMixingSampler` built before ``fit`` (``layout="shard"``,
            ``resume="continue"``, ``strategy=`` this strategy); usually leave None and build it
            with ``self.dataflex.sampler(...)`` in ``train_dataloader`` (``build_sampler(self.trainer,
            ...)`` in a ``LightningDataModule``).
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
        self._step_metrics = StepMetrics()
        self._step_at_batch_start = 0
        self._sampler_keys: frozenset | None = None
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
        if stage == "fit":
            self._detach(pl_module)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Lightning skips teardown when fit raises; a module left bound would accept dataflex calls later.
        self._detach(pl_module)

    def _detach(self, pl_module: pl.LightningModule) -> None:
        handle = getattr(pl_module, self.attribute, None)
        if isinstance(handle, BoundStrategy):
            handle._unbind()
        self.trainer = None
        self._step_metrics = StepMetrics()

    def build_sampler(self, dataset: Any, *, batch_size: int, seed: int = 0, **options: Any) -> DomainMixingSampler:
        """The prompt sampler of this run (see `sampling.build_sampler`); call it during ``fit``."""
        if self.trainer is None:
            raise ConfigError("the prompt sampler is built during fit, in train_dataloader(); call "
                              "self.dataflex.sampler(...) there (or build_sampler(self.trainer, ...) in a LightningDataModule)")
        sampler = make_sampler(self.strategy, dataset, batch_size=batch_size, seed=seed,
                               world_size=self.trainer.world_size, rank=self.trainer.global_rank, options=options)
        self.register_sampler(sampler)
        return sampler

    def register_sampler(self, sampler: DomainMixingSampler) -> None:
        """Make ``sampler`` the one this callback checks, saves and restores (`build_sampler` calls this)."""
        if self.strategy.mix_enabled and sampler.strategy is not self.strategy:
            raise ConfigError("DataFlexCallback(sampler=...) must follow the callback's strategy: build it with "
                              "DomainMixingSampler(..., strategy=callback.strategy), or use self.dataflex.sampler(...)")
        if self._pending_sampler_state is not None:
            sampler.load_state_dict(self._pending_sampler_state)
            self._pending_sampler_state = None
        self.sampler = sampler
        self._sampler_keys = None

    # ------------------------------------------------------------ training hooks

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        found = find_mixing_sampler(trainer.train_dataloader)
        check_distributed_data(trainer.train_dataloader, trainer.world_size)
        if found is None:
            acts = [part for part, present in (("mixes domains", self.strategy.mix_enabled),
                                               ("skips prompts before generation",
                                                self.strategy.prompt_filter is not None)) if present]
            if acts:
                raise ConfigError(f"dataflex: strategy {self.strategy.name!r} {' and '.join(acts)}, which acts through "
                                  f"the prompt sampler, but the train dataloader has none; {FIX}")
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
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # Log once per optimizer step: with gradient accumulation (automatic, or manual optimisation
        # stepping every k batches) the micro-batches in between are aggregated, not overwritten.
        if trainer.global_step == self._step_at_batch_start or not self._step_metrics.pending:
            return
        values, responses = self._step_metrics.flush()
        for name, value in values.items():
            # Decisions are made on the gathered batch, so every rank logs the same values: no sync needed.
            pl_module.log(self.log_prefix + name, value, on_step=True, on_epoch=True, batch_size=max(responses, 1),
                          sync_dist=False, reduce_fx="max" if name in COUNTERS else "mean")

    def _record(self, metrics: Mapping[str, float], responses: int) -> None:
        self._step_metrics.update(metrics, responses)

    def prompt_keys_known(self) -> frozenset | None:
        """The keys the registered sampler names its rows by (cached; None without a pre-rollout filter)."""
        if self.sampler is None:
            return None
        if self._sampler_keys is None:
            self._sampler_keys = sampler_keys(self.sampler)
        return self._sampler_keys

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
