"""`DataFlexCallback`: a data strategy for any GRPO-style LightningModule, one callback and one loss call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl

from dataflex_callbacks import ConfigError, Decision, DomainMixingSampler, RolloutBatch, Strategy
from dataflex_callbacks.host import as_strategy, checkpoint_state, prompt_choosing_parts, restore_strategy
from dataflex_callbacks.host.zero_rewards import ZeroRewardWatch
from dataflex_callbacks.metrics import DomainRewardStats, RunSummary

from .binding import BoundStrategy
from .sampler_checks import FIX, check_distributed_data, check_mixing_sampler, find_mixing_sampler
from .sampling import make_sampler, sampler_keys
from .step_metrics import COUNTERS, StepMetrics, cover_domains, domain_log_groups

GROUP_SIZE_ATTRIBUTE = "group_size"
"""The module attribute the callback reads an allocation part's group size G from (completions per trained group)."""


class DataFlexCallback(pl.Callback):
    """Apply a data strategy (selection, reweighting, domain mixing) inside a Lightning ``fit``.

    At fit start the module gets ``pl_module.dataflex`` (a `BoundStrategy`); its
    ``training_step`` calls ``self.dataflex.loss(per_token_loss, rollout_batch)``. Decisions are
    made on the batch gathered from all ranks (identical everywhere), the domain tracker is fed
    once per step, the strategy's metrics are logged as ``dataflex/<name>`` when the optimizer
    steps (aggregated over gradient-accumulation micro-batches, per step and per epoch), and the
    strategy and sampler state travel in Lightning checkpoints.

    When the rollouts carry domains, the step's rows also feed one `DomainRewardStats`
    (``callback.domain_stats``), logged as ``dataflex/selection_reward/<d>``, ``solve_rate/<d>``,
    ``kept_frac/<d>``, ``responses/<d>`` and ``nonfinite_rewards/<d>`` (see `step_metrics`).
    Each rank adds only its own rows and ``compute()`` sums the declared states over ranks: the
    rows of the ranks are disjoint, so every response counts once. (Adding the gathered batch on
    every rank would need the reduction off, else every count would be multiplied by the world size.)

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
        strict: on resume, refuse a checkpoint whose strategy config differs from this one
            (default). ``strict=False`` restores only the mixing and pre-rollout state.
    """

    def __init__(
        self,
        strategy: Any = "baseline",
        *,
        sampler: DomainMixingSampler | None = None,
        attribute: str = "dataflex",
        log_prefix: str = "dataflex/",
        strict: bool = True,
    ):
        self.strategy: Strategy = as_strategy(strategy)
        self.strict = strict
        self.attribute = attribute
        self.log_prefix = log_prefix
        self.trainer: pl.Trainer | None = None
        self.sampler: DomainMixingSampler | None = None
        self.batches_this_epoch = 0
        self._pending_sampler_state: Mapping[str, Any] | None = None
        self._step_metrics = StepMetrics()
        self.domain_stats: DomainRewardStats | None = None
        self._step_at_batch_start = 0
        self._sampler_keys: frozenset | None = None
        self.summary = RunSummary()  # what the strategy kept, printed at train end
        self.zero_rewards = ZeroRewardWatch()  # warns once when the first steps' rewards are all 0 or None
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
            raise ConfigError(
                f"{type(pl_module).__name__}.{self.attribute} is already a {type(handle).__name__}; "
                f"rename it, or pass DataFlexCallback(attribute='...') to attach the strategy elsewhere"
            )
        self.trainer = trainer
        self.zero_rewards = ZeroRewardWatch()  # each fit watches its own first steps
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
        self.domain_stats = None

    def build_sampler(self, dataset: Any, *, batch_size: int, seed: int = 0, **options: Any) -> DomainMixingSampler:
        """The prompt sampler of this run (see the module-level `build_sampler`); call it during ``fit``."""
        if self.trainer is None:
            raise ConfigError(
                "the prompt sampler is built during fit, in train_dataloader(); call "
                "self.dataflex.sampler(...) there (or build_sampler(self.trainer, ...) in a LightningDataModule)"
            )
        sampler = make_sampler(
            self.strategy,
            dataset,
            batch_size=batch_size,
            seed=seed,
            world_size=self.trainer.world_size,
            rank=self.trainer.global_rank,
            options=options,
        )
        self.register_sampler(sampler)
        return sampler

    def register_sampler(self, sampler: DomainMixingSampler) -> None:
        """Make ``sampler`` the one this callback checks, saves and restores (`build_sampler` calls this)."""
        if self.strategy.mix_enabled and sampler.strategy is not self.strategy:
            raise ConfigError(
                "DataFlexCallback(sampler=...) must follow the callback's strategy: build it with "
                "DomainMixingSampler(..., strategy=callback.strategy), or use self.dataflex.sampler(...)"
            )
        if self._pending_sampler_state is not None:
            sampler.load_state_dict(self._pending_sampler_state)
            self._pending_sampler_state = None
        self.sampler = sampler
        self._sampler_keys = None

    # ------------------------------------------------------------ training hooks

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.summary.reset()
        self._bind_group_size(pl_module)
        found = find_mixing_sampler(trainer.train_dataloader)
        check_distributed_data(trainer.train_dataloader, trainer.world_size)
        if found is None:
            words = {"mix": "mixes domains", "pre_select": "skips prompts before generation"}
            acts = [words[part] for part in prompt_choosing_parts(self.strategy)]
            if acts:
                raise ConfigError(
                    f"dataflex: strategy {self.strategy.name!r} {' and '.join(acts)}, which acts through "
                    f"the prompt sampler, but the train dataloader has none; {FIX}"
                )
            if trainer.is_global_zero:
                print(self.strategy.summary_line(None), flush=True)  # domains arrive with the module's batches
            return
        sampler, loader = found
        check_mixing_sampler(sampler, loader.batch_size, self.strategy, trainer.world_size)
        if sampler is not self.sampler:
            if self._pending_sampler_state is not None:
                raise ConfigError(
                    "the checkpoint holds DomainMixingSampler state, but the sampler in the dataloader was "
                    "built outside the callback, after it could be restored; build it with "
                    "self.dataflex.sampler(...) in train_dataloader() or pass it to DataFlexCallback(sampler=...)"
                )
            self.sampler = sampler
        if trainer.is_global_zero:
            print(self.strategy.summary_line(sampler.domains, sampler.domain_key), flush=True)

    def _bind_group_size(self, pl_module: pl.LightningModule) -> None:
        """Bind the module's ``group_size`` (completions per trained group) to the allocation part; an allocator of
        equal groups without one, from the module or its params, is refused in one line naming the attribute."""
        needs = self.strategy.allocation_needs
        if needs is None:
            return
        size = getattr(pl_module, GROUP_SIZE_ATTRIBUTE, None)  # a plain attribute of the user's module, if set
        if size is not None:
            self.strategy.bind_allocation_group_size(size)
        elif needs.equal_groups and self.strategy.allocation_group_size is None:
            raise ConfigError(
                f"dataflex: allocation {needs.name!r} completes groups of G completions, but "
                f"{type(pl_module).__name__} has no '{GROUP_SIZE_ATTRIBUTE}': set self.{GROUP_SIZE_ATTRIBUTE} = G "
                "(completions per trained group) in its __init__, or give group_size in the allocation's params"
            )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.batches_this_epoch = 0
        if self.sampler is not None and self.sampler.position >= len(self.sampler):
            # Lightning stops a sized dataloader after len() batches without exhausting the sampler's
            # iterator, so the sampler cannot tell a finished epoch from an interrupted one. A state
            # round trip at a full position closes the epoch: the next iterator starts a fresh one.
            self.sampler.load_state_dict(self.sampler.state_dict())

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.batches_this_epoch += 1
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Log once per optimizer step: with gradient accumulation (automatic, or manual optimisation
        # stepping every k batches) the micro-batches in between are aggregated, not overwritten.
        if trainer.global_step == self._step_at_batch_start:
            return
        self.summary.end_step()
        if self._step_metrics.pending:
            values, responses = self._step_metrics.flush()
            for name, value in values.items():
                # Decisions are made on the gathered batch, so every rank logs the same values: no sync needed.
                pl_module.log(
                    self.log_prefix + name,
                    value,
                    on_step=True,
                    on_epoch=True,
                    batch_size=max(responses, 1),
                    sync_dist=False,
                    reduce_fx="max" if name in COUNTERS else "mean",
                )
        if self.strategy.allocates_rollouts:  # counted by the strategy's allocator, the same on every rank
            for name, value in self.strategy.allocation_metrics().items():
                pl_module.log(self.log_prefix + name, value, on_step=True, on_epoch=False, sync_dist=False)
        stats = self.domain_stats
        if stats is not None and stats.update_called:
            # A collective under DDP: every rank fed the same micro-batches, so every rank gets here at this step.
            values = stats.compute()
            stats.reset()
            for group, batch_size, reduce_fx in domain_log_groups(values, stats.domains):
                pl_module.log_dict(
                    {self.log_prefix + name: value for name, value in group.items()},
                    on_step=True,
                    on_epoch=True,
                    batch_size=batch_size,
                    sync_dist=False,
                    reduce_fx=reduce_fx,
                )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            print(self.summary.line(self.strategy.name), flush=True)

    def _record(self, decision: Decision, everyone: RolloutBatch, local: RolloutBatch, decided: Decision) -> None:
        """Feed one micro-batch: the strategy's metrics of the gathered batch, and this rank's rows by domain.

        Args:
            decision: this rank's part of the decision (``keep (B,)`` for the ``B`` local rows).
            everyone: the gathered batch (the same on every rank).
            local: this rank's rows, detached.
            decided: the decision on ``everyone`` (the same on every rank), for the train-end summary.
        """
        self.summary.update(everyone, decided)
        self._step_metrics.update(decision.metrics, everyone.n)
        # The gathered rewards are the same on every rank: each reaches the same verdict, rank 0 warns.
        self.zero_rewards.observe(
            everyone.rewards, self._step_at_batch_start, warn=self.trainer is None or self.trainer.is_global_zero
        )
        if local.domains is None:
            return
        labels = list(self.strategy.domains or []) + list(everyone.domains)
        if not labels:
            return
        self.domain_stats = cover_domains(self.domain_stats, labels, local.rewards.device)
        self.domain_stats.update(local.rewards, local.domains, keep=decision.keep)

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
            sampler_state["position"] = min(
                sampler_state["position"], self.batches_this_epoch * self.sampler.batch_size
            )
        return checkpoint_state(self.strategy, sampler=sampler_state, batches_this_epoch=self.batches_this_epoch)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        restore_strategy(
            self.strategy,
            state_dict,
            source="the Lightning checkpoint's DataFlexCallback state",
            strict=self.strict,
            strict_setting="DataFlexCallback(..., strict=False)",
            writer="DataFlexCallback",
        )
        self.batches_this_epoch = int(state_dict.get("batches_this_epoch", 0))
        sampler_state = state_dict.get("sampler")
        if sampler_state is None:
            return
        if self.sampler is not None:
            self.sampler.load_state_dict(sampler_state)
        else:  # the sampler is built later, in train_dataloader(); `register_sampler` restores it
            self._pending_sampler_state = sampler_state


def dataflex_callback(trainer: pl.Trainer) -> DataFlexCallback:
    """The one `DataFlexCallback` of ``trainer`` (raises naming the fix when there is none, or several)."""
    found = [
        callback for callback in getattr(trainer, "callbacks", None) or [] if isinstance(callback, DataFlexCallback)
    ]
    if len(found) != 1:
        problem = "has no DataFlexCallback" if not found else f"has {len(found)} DataFlexCallbacks"
        raise ConfigError(f"the Trainer {problem}; pass exactly one: Trainer(callbacks=[DataFlexCallback('skip')])")
    return found[0]


def build_sampler(
    trainer: pl.Trainer, dataset: Any, *, batch_size: int, seed: int = 0, **options: Any
) -> DomainMixingSampler:
    """The run's prompt sampler, for a ``LightningDataModule.train_dataloader`` (see `sampling`).

    ``sampler = build_sampler(self.trainer, dataset, batch_size=B)``, then
    ``DataLoader(dataset, batch_size=B, sampler=sampler)``: ``B`` prompts per rank per step.

    Args:
        trainer: the Trainer running ``fit`` (``self.trainer`` in a data module).
        dataset: map-style dataset (``datasets.Dataset``, list of dicts, ...) of ``n`` rows.
        batch_size: prompts per rank per step; the DataLoader's ``batch_size``.
        seed: seed of the draw stream (the same on every rank).
        options: more `DomainMixingSampler` options (``domain_key``, ``domains``, ``proportions``,
            ``num_samples``, ``prompt_key_column``, ``mixing``, ``quota``, ...); ``proportions`` (or
            ``mixing=True``) draws by domain even without a mix part.
    """
    return dataflex_callback(trainer).build_sampler(dataset, batch_size=batch_size, seed=seed, **options)
