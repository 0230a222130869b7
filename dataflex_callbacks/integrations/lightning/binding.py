"""`BoundStrategy`: what ``self.dataflex`` is inside a LightningModule trained with `DataFlexCallback`.

One line in ``training_step`` applies the strategy::

    loss = self.dataflex.loss(per_token_loss, RolloutBatch(rewards, group_ids=..., completion_mask=...))

With an ``allocation`` part, ``self.dataflex.allocation_rounds(keys, domains)`` tells the module how many
completions each prompt gets next (`dataflex_callbacks.sampling.AllocationRounds`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from dataflex_callbacks import AllocationRounds, DataFlexError, Decision, DomainMixingSampler, RolloutBatch, Strategy
from dataflex_callbacks.errors import user_stacklevel
from dataflex_callbacks.host import TENSOR_FIELDS, batch_fields, decide, finish_loss, local_decision

from .aggregation import loss_sum_and_count
from .gather import distributed_world, gather_rollouts
from .sampling import check_prompt_keys


class BoundStrategy:
    """The strategy of a `DataFlexCallback`, as a LightningModule's ``training_step`` uses it.

    `DataFlexCallback` sets ``pl_module.dataflex`` to one of these at fit start and unbinds it at
    the end (also when ``fit`` stops with an exception). Declaring ``self.dataflex =
    BoundStrategy()`` in ``__init__`` is optional; it turns a forgotten callback into a clear
    error instead of an ``AttributeError``.

    The callback binds itself (``callback.DataFlexCallback``, which imports this module; this one
    does not import it back): its ``trainer``, ``strategy``, ``sampler``, ``build_sampler``,
    ``prompt_keys_known`` and ``_record`` are used here.
    """

    def __init__(self) -> None:
        self._callback: Any = None
        self._last: tuple[int, RolloutBatch, Decision] | None = None
        self._warned_dynamic = False

    # ------------------------------------------------------------ binding

    def _bind(self, callback: Any) -> None:
        self._callback, self._last = callback, None

    def _unbind(self) -> None:
        self._callback, self._last = None, None

    @property
    def bound(self) -> bool:
        """Whether a `DataFlexCallback` of a running ``fit`` is attached."""
        return self._callback is not None and self._callback.trainer is not None

    def _trainer(self):
        if not self.bound:
            raise DataFlexError(
                "self.dataflex is not attached to a data strategy: add the callback, e.g. "
                "Trainer(callbacks=[DataFlexCallback('difffilter')]), and call dataflex.loss only inside training_step"
            )
        trainer = self._callback.trainer
        if not trainer.training:
            raise DataFlexError(
                "dataflex.loss / dataflex.decide feed the strategy's statistics and belong in "
                "training_step; compute validation losses without them"
            )
        return trainer

    @property
    def strategy(self):
        """The bound `Strategy` (raises when no callback is attached)."""
        self._trainer()
        return self._callback.strategy

    # ------------------------------------------------------------ decisions and loss

    def decide(self, batch: RolloutBatch) -> Decision:
        """The strategy's decision for this rank's rows of the step, decided on the batch of all ranks.

        Called again with the same ``batch`` object in the same step, it returns the same decision
        (the statistics are fed once). Metrics are logged by the callback after the step.

        Args:
            batch: this rank's rollouts; tensors are detached before scoring.

        Returns:
            A `Decision` for the ``batch.n`` local rows: ``keep (N,)``, ``weights (N,)`` or ``(N, L)``.
        """
        trainer = self._trainer()
        if not isinstance(batch, RolloutBatch):
            raise DataFlexError(f"dataflex expects a dataflex_callbacks.RolloutBatch; got {type(batch).__name__}")
        step = trainer.global_step
        if self._last is not None and self._last[0] == step and self._last[1] is batch:
            return self._last[2]
        strategy = self._callback.strategy
        strategy.check_host(batch_fields(batch), host="the RolloutBatch given to dataflex")
        if strategy.config.dynamic_sampling is not None and strategy.signal_buffer is None and not self._warned_dynamic:
            self._warned_dynamic = True
            warnings.warn(
                "dataflex: the strategy has a dynamic_sampling part, but no SignalGroupBuffer drives it, so "
                "every generated group trains as usual (only select/reweight/mix apply); build "
                "SignalGroupBuffer(self.dataflex.strategy) in training_step and train on its take() "
                "(docs/dynamic_sampling.md), or remove the part",
                stacklevel=user_stacklevel(),
            )
        detached = batch.replace(
            **{name: getattr(batch, name).detach() for name in TENSOR_FIELDS if getattr(batch, name) is not None}
        )
        everyone, rows = gather_rollouts(detached)
        if strategy.skips_prompts:
            self._prepare_pre_select(strategy, everyone)
        # The gathered batch is the same on every rank; only rank 0 says when a step keeps nothing.
        decided = decide(strategy, everyone, step, warn=trainer.is_global_zero)
        decision = local_decision(decided, rows, batch.num_tokens)
        self._callback._record(decision, everyone, detached, decided)
        self._last = (step, batch, decision)
        return decision

    def allocation_rounds(self, keys: Sequence[Any], domains: Sequence[str] | None = None) -> AllocationRounds:
        """The rounds of this step's rollout allocation over ``P`` prompts (``keys``, ``domains``: one per prompt).

        ``rounds.start()`` and each ``rounds.add(rewards, prompt_index, sync=...)`` return ``(P,)``: how many
        completions each prompt gets next (0: none); ``rounds.finish()`` says which groups train (and which reuse
        an earlier response), and carries the ``alloc/*`` metrics. Under DDP pass ``sync=True`` and give every rank
        the same ``keys``: the rewards of every rank decide, so every rank gets the same counts. The allocator's
        state is in the strategy's, saved with Lightning's checkpoint. A strategy without an allocation part is an
        error naming the fix.
        """
        self._trainer()
        strategy = self._callback.strategy
        if not strategy.allocates_rollouts:
            raise DataFlexError(
                f"dataflex: strategy {self._callback.strategy.name!r} has no allocation part, so nothing decides how "
                "many completions each prompt gets; add one (e.g. the 'screen' or 'adaptive' preset), or generate "
                "your group size for every prompt"
            )
        return strategy.allocation_rounds(keys, domains)

    def _prepare_pre_select(self, strategy: Strategy, everyone: RolloutBatch) -> None:
        """Check the step's prompt keys against the sampler's, and give the filter the group size.

        Both read the gathered batch, identical on every rank, so every rank raises alike.
        """
        known = self._callback.prompt_keys_known()
        if known is not None and everyone.prompt_keys is not None:
            check_prompt_keys(everyone.prompt_keys, known, self._callback.sampler)
        if everyone.group_ids is not None and everyone.n:
            # A skipped prompt saves one group of completions: the mean group size of the step.
            groups = int(torch.unique(everyone.group_ids).numel())
            strategy.set_completions_per_prompt(max(1, round(everyone.n / groups)))

    def loss(
        self,
        per_token_loss: torch.Tensor,
        batch: RolloutBatch,
        *,
        loss_type: str = "token_mean",
        decision: Decision | None = None,
        mask: torch.Tensor | None = None,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """The selected, reweighted scalar loss of this step: dropped responses leave it and its normaliser.

        Args:
            per_token_loss: ``(N, L)`` per-token loss of this rank's responses, in the graph.
            batch: the same responses' `RolloutBatch`.
            loss_type: ``token_mean`` | ``sequence_mean`` | ``sequence_sum`` | ``fixed_length``
                (see `aggregation`).
            decision: reuse a decision from `decide` (default: decide now).
            mask: ``(N, L)`` valid tokens (default ``batch.valid_mask``, else all tokens).
            max_length: ``L`` of the ``fixed_length`` normaliser (default ``per_token_loss.shape[1]``).

        Under DDP the normaliser counts the kept entries of all ranks and the loss is scaled by the
        world size, so the gradient DDP averages equals the gradient of the global reduced batch;
        the mean over ranks of the returned value is the global loss.
        """
        if decision is None:
            decision = self.decide(batch)
        else:
            self._trainer()
        if mask is None:
            mask = batch.valid_mask
        if mask is None:
            mask = torch.ones(per_token_loss.shape, dtype=torch.bool, device=per_token_loss.device)
        total, count = loss_sum_and_count(
            per_token_loss, decision, mask.to(per_token_loss.device).bool(), loss_type, max_length=max_length
        )
        world, _ = distributed_world()
        if world > 1:
            count = count.detach().clone()
            dist.all_reduce(count, op=dist.ReduceOp.SUM)
            total = total * world
        return finish_loss(total, count)

    # ------------------------------------------------------------ data

    def sampler(self, dataset: Any, *, batch_size: int, seed: int = 0, **options: Any) -> DomainMixingSampler:
        """The run's prompt sampler for ``train_dataloader``: rank-sharded, driven and restored by the callback.

        Pass it to ``DataLoader(dataset, batch_size=batch_size, sampler=...)`` with the same
        ``batch_size`` (prompts per rank per step). With a ``mix`` part it follows the mixer;
        without one it draws all rows as one pool (the data's own domain distribution). Lightning
        keeps it as it is under DDP. ``options`` go to `DomainMixingSampler` (``domains``,
        ``proportions``, ``num_samples``, ``prompt_key_column``, ...); the domain column is the config's
        ``domain_key``. See `callback.build_sampler`, its twin for a ``LightningDataModule``.
        """
        if self._callback is None or self._callback.trainer is None:
            self._trainer()
        return self._callback.build_sampler(dataset, batch_size=batch_size, seed=seed, **options)
