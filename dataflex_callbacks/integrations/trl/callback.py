"""`DataFlexCallback`: a data strategy applied inside a TRL trainer (``GRPOTrainer``; `rloo` adds ``RLOOTrainer``).

A plain ``TrainerCallback`` never sees rewards or advantages, so the callback works through
six trainer methods (`HOOKS`: wrapped by `attach`, overridden by `DataFlexTrainerMixin`):

- ``_calculate_rewards``: remember the rewards TRL gathered from every process (and warn, once, when
  every reward of the first steps is 0 or None: `dataflex_callbacks.host.zero_rewards`);
- ``_generate_and_score_completions``: after TRL computed advantages, build the global
  `RolloutBatch`, run ``strategy.apply`` (same decision on every rank), mask dropped rows
  out of the loss and store per-row keep/weights in the batch so they follow TRL's shuffle
  and split into micro-batches. With a ``dynamic_sampling`` part it first generates further
  rounds until the batch holds B groups that carry signal (`dynamic.DynamicSampling`);
- ``_get_per_token_logps_and_entropies``: inside the loss only, compute the deferred
  current-policy weights (``strategy.apply_policy``) and apply all weights to the gradient;
- ``_compute_loss``: rescale the loss so the normaliser matches physical removal;
- ``_load_optimizer_and_scheduler``: restore the strategy (and sampler) state on ``resume_from_checkpoint``;
- ``_get_train_sampler``: when the strategy chooses prompts before rollout (a ``mix`` or
  ``pre_select`` part), a `DomainMixingSampler` with ``RepeatSampler``'s layout replaces TRL's
  sampler (see `sampling`).

The hooks log into TRL's own ``_metrics`` (``dataflex/kept_frac``, ``dataflex/kept_tokens``,
``dataflex/mix/target/<domain>``, ``dataflex/pre_select/skipped_prompts``, ...), shown on every logging step;
``on_save`` writes the strategy and sampler states into each checkpoint folder.

What differs between TRL trainers is declared on the callback class, so a host is a small subclass:
`DataFlexCallback.host_class` and ``trainer_name`` (which trainer, named in messages), ``loss_aggregation``
(how the loss is normalised), and `DataFlexCallback.remove_dropped` (how a dropped row leaves the loss).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import torch
from trl import GRPOTrainer

from dataflex_callbacks.errors import (
    ConfigError,
    HostError,
    WrongHostError,
    user_stacklevel,
)
from dataflex_callbacks.host import (
    ROW_NORMALISED,
    acts_before_rollout,
    as_strategy,
    decide,
    grpo_fields,
    kept_token_mask,
    local_decision,
    micro_batch_decision,
    removal_scale,
    resolve_domain_key,
    restrict_rows,
)
from dataflex_callbacks.host.zero_rewards import ZeroRewardWatch

from .allocation import Allocation
from .dynamic import DynamicSampling
from .fewer_groups import FILLER_TOKENS_KEY, STEP_SCALE_KEY, FewerGroups, fill_rows
from .lifecycle import StrategyCallback
from .loss_scaling import can_drop_rows, check_loss_type, scale_gradient
from .sampling import DEFAULT_DOMAIN_SOURCE, check_sampling_dataset, grpo_mixing_sampler, row_key
from .signals import (
    global_rollout_batch,
    local_policy_batch,
    resolve_reward_index,
    selection_reward_text,
    selection_rewards,
)
from .train_data import check_enough_prompts, check_prompt_positions, check_stream, is_stream, sampler_resume_message
from .trainer_settings import TrainerSettings, check_trl_strategy

# Keys the adapter adds to TRL's per-row batch dict; tensors, so TRL's shuffle/split carry them.
KEEP_KEY = "dataflex_keep"
WEIGHTS_KEY = "dataflex_weights"
REWARDS_KEY = "dataflex_rewards"
GROUP_IDS_KEY = "dataflex_group_ids"
RESPONSE_WEIGHTS_KEY = "dataflex_response_weights"

NOT_ATTACHED_MESSAGE = (
    "{callback} was passed in callbacks=[...] but never attached to the trainer: a TrainerCallback alone "
    "never sees rewards or advantages, so it would silently do nothing. Attach it after building the trainer:\n"
    "    from dataflex_callbacks.integrations.trl import attach\n"
    "    attach(trainer, strategy)\n"
    "or build the trainer as {trainer}(..., strategy=strategy) instead of {host}."
)
"""Raised at train start by a callback nobody bound; formatted with the callback, trainer and host names."""

HOOKS = {
    "_calculate_rewards": "calculate_rewards",
    "_generate_and_score_completions": "score_completions",
    "_get_per_token_logps_and_entropies": "per_token_logps",
    "_compute_loss": "compute_loss",
    "_load_optimizer_and_scheduler": "load_optimizer_and_scheduler",
    "_get_train_sampler": "train_sampler",
}
"""TRL trainer method -> the `DataFlexCallback` method that wraps it (``hook(trainer, original, *args)``)."""


class DataFlexCallback(StrategyCallback):
    """Apply a data strategy (selection, reweighting, mixing targets) to a TRL ``GRPOTrainer``.

    Use it through `attach(trainer, strategy)` or `DataFlexGRPOTrainer(..., strategy=...)`. A
    subclass serves another TRL trainer with the same structure (see `rloo.DataFlexRLOOCallback`):
    it sets `host_class` and `trainer_name` and overrides what its loss does differently
    (`loss_aggregation`, `remove_dropped`, `loss_name`, `exact_removal_advice`).

    Args:
        strategy: a `Strategy`, a preset name (``"difffilter"``), a config dict, or a YAML path.
        **options: the adapter's options, `AdapterOptions` (``selection_reward``, ``domain_key``,
            ``prompt_key_column``, ``record_decisions``, ``strict``); kept as ``self.options``. With
            ``record_decisions`` every decision's ``(step, keep, weights, metrics, prompt_keys)`` is
            kept in ``self.decisions``.
    """

    host_class: type = GRPOTrainer
    """The TRL trainer class this callback serves (subclasses included); `attach` picks the callback by it."""

    exact_removal_advice = "Use loss_type='dapo' or 'bnpo' for exact equivalence."
    """How to make dropping rows exactly equal to removing them when an extra loss term is rescaled by B/K."""

    supports_dynamic_sampling = True
    """Whether this host runs a strategy's ``dynamic_sampling`` part (`dynamic.DynamicSampling`)."""

    supports_fewer_groups = True
    """Whether this host runs ``pre_select.refill: false`` (`fewer_groups.FewerGroups`)."""

    def __init__(self, strategy: Any, **options: Any):
        super().__init__(strategy, **options)
        self.dynamic: DynamicSampling | None = self._dynamic_sampling()
        self.allocation = Allocation(self.strategy) if self.strategy.allocates_rollouts else None  # checked above
        self.fewer = None if self.strategy.refills_prompts else FewerGroups(self.strategy)  # checked above
        self.last_decision = None
        self._domains_seen: list[str] | None = None
        self._reward_index: int | None = None
        self._gathered_rewards: torch.Tensor | None = None
        self._weighted = False
        self._loss_inputs: dict | None = None
        self._pending_sampler_state: dict | None = None
        self.zero_rewards = ZeroRewardWatch()  # named after the trainer's reward functions in bind

    @classmethod
    def check_strategy(cls, strategy: Any, settings: TrainerSettings | None = None) -> None:
        """Refuse, in one line, a strategy this trainer cannot run with ``settings`` (`check_trl_strategy`).

        ``settings`` None: the rules on the strategy alone (``dataflex validate --host trl``). The rules that
        read the train dataset run in `bind`.
        """
        check_trl_strategy(as_strategy(strategy), cls, settings)

    def _dynamic_sampling(self) -> DynamicSampling | None:
        """The dynamic-sampling loop when the strategy has the part; refused by hosts that cannot run it."""
        self.check_strategy(self.strategy)
        if self.strategy.config.dynamic_sampling is None:
            return None
        return DynamicSampling(self.strategy)

    def reconfigure(self, strategy: Any = None, **options: Any) -> None:
        """Give a callback not attached yet another strategy and/or options (what `attach` does with one
        passed in ``callbacks=[...]``); the options are checked as in the constructor."""
        if self.attached:
            raise HostError(f"dataflex: this {type(self).__name__} is already attached to a trainer; create a new one.")
        self.options = self.options.updated(options, "attach()")
        if "domain_key" in options:
            self.domain_key = self.options.domain_key
        if strategy is not None:
            self.strategy = as_strategy(strategy)

    # ------------------------------------------------------------------ what differs per host
    def loss_aggregation(self, trainer) -> str:
        """How ``trainer``'s loss is normalised: a kind of `dataflex_callbacks.host.AGGREGATIONS`.

        GRPO: its ``loss_type`` mapped by `loss_scaling.LOSS_AGGREGATION`; an unknown one is an error
        naming the supported loss types.
        """
        return check_loss_type(trainer.loss_type)

    def loss_name(self, trainer) -> str:
        """The trainer's loss as its configuration names it, for messages (``"loss_type='grpo'"``)."""
        return f"loss_type={trainer.loss_type!r}"

    def remove_dropped(self, output: dict, keep: torch.Tensor, token_keep: torch.Tensor) -> None:
        """Take this rank's dropped rows and tokens out of the host's loss, in TRL's batch dict (in place).

        GRPO: TRL multiplies ``completion_mask`` by ``tool_mask`` to get the loss mask (attention keeps
        using ``completion_mask``), so ``token_keep`` goes into ``tool_mask``: dropped rows and tokens
        leave the loss and its normaliser, the forward pass is unchanged. `per_token_logps` reads the
        same mask inside the loss.

        Args:
            output: TRL's batch dict for this rank (``completion_mask`` ``(B, T)``, ...).
            keep: ``(B,)`` bool, the rows that stay.
            token_keep: ``(B, T)`` bool, the tokens that stay (False on every token of a dropped row).
        """
        tool_mask = output.get("tool_mask")
        base_tool_mask = torch.ones_like(output["completion_mask"]) if tool_mask is None else tool_mask
        output["tool_mask"] = base_tool_mask * token_keep.to(base_tool_mask.dtype)

    # ------------------------------------------------------------------ binding
    def bind(self, trainer) -> None:
        """Check the trainer's configuration against the strategy and remember the trainer."""
        if not isinstance(trainer, self.host_class):
            raise WrongHostError(
                f"dataflex: {type(self).__name__} works with trl.{self.host_class.__name__}; got "
                f"{type(trainer).__name__}. attach(trainer, strategy) picks the callback for a TRL GRPOTrainer or "
                "RLOOTrainer; for other trainers use the Lightning or verl adapters, or the core API directly."
            )
        self.refuse_other_trainer(trainer)
        self.check_strategy(self.strategy, TrainerSettings.of(trainer))
        aggregation = self.loss_aggregation(trainer)
        self._reward_index = resolve_reward_index(self.options.selection_reward, trainer.reward_func_names)
        self.zero_rewards = ZeroRewardWatch(reward_names=trainer.reward_func_names)
        self.domain_key, domain_source = resolve_domain_key(self.strategy, self.domain_key)
        if (
            aggregation in ROW_NORMALISED
            and can_drop_rows(self.strategy)
            and (getattr(trainer, "_entropy_bonus_enabled", False) or getattr(trainer, "aux_loss_enabled", False))
        ):
            warnings.warn(
                f"dataflex: with {self.loss_name(trainer)} the loss of a micro-batch with K of B rows kept is "
                "rescaled by B/K after TRL adds the entropy bonus / MoE aux loss, so those terms are rescaled too: "
                "selection is then not exactly equal to physical removal, and the logged loss is (B/K) * (policy "
                f"loss - entropy_coef * entropy + router_aux_loss_coef * aux loss). {self.exact_removal_advice}",
                stacklevel=user_stacklevel(),
            )
        dataset = getattr(trainer, "train_dataset", None)
        column_names = getattr(dataset, "column_names", None) or []
        available = grpo_fields(domains=self.domain_key in column_names)
        # Before check_host: its generic "needs domain labels" would not name the option that fixes it.
        check_stream(dataset, self.strategy)
        if not is_stream(dataset):  # a stream's pre-rollout filter runs over the stream (streaming.py)
            check_sampling_dataset(
                dataset, self.strategy, self.domain_key, self.options.prompt_key_column, domain_source
            )
        check_enough_prompts(trainer, dataset, self.strategy, self.domain_key)
        host = f"the TRL {self.host_class.__name__} (dataset columns {list(column_names)})"
        self.strategy.check_host(available, host=host)
        if column_names and self.domain_key not in column_names and domain_source != DEFAULT_DOMAIN_SOURCE:
            warnings.warn(
                f"dataflex: {domain_source} names a column the train dataset does not have ({list(column_names)}): "
                "no per-domain metrics. Name the column holding each prompt's domain.",
                stacklevel=user_stacklevel(),
            )
        # The domains the train-start line names (a stream is not read ahead for them).
        if is_stream(dataset):
            self._domains_seen = None
        else:
            self._domains_seen = sorted({str(d) for d in dataset[self.domain_key]}) if "domains" in available else []
        if "domains" in available:
            self.bind_mix_domains(self._domains_seen)
        if self.dynamic is None or self.dynamic.strategy is not self.strategy:  # attach() may replace the strategy
            self.dynamic = self._dynamic_sampling()
        if self.dynamic is not None:
            self.dynamic.bind(trainer, self.domain_key, self.options.prompt_key_column)
        if self.allocation is None or self.allocation.strategy is not self.strategy:
            self.allocation = Allocation(self.strategy) if self.strategy.allocates_rollouts else None
        if self.allocation is not None:
            self.allocation.bind(trainer, self.domain_key, self.options.prompt_key_column, self._reward_index)
        self.fewer = None if self.strategy.refills_prompts else FewerGroups(self.strategy)  # attach() may replace it
        if self.fewer is not None:
            self.fewer.bind(trainer, self.domain_key, self.options.prompt_key_column, stream=is_stream(dataset))
        self.strategy.bind_selection_reward(
            f"{self.trainer_name}(..., selection_reward=<one of the trainer's reward_func_names>)"
            " or attach(trainer, strategy, selection_reward=...)"
        )
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.attached:
            raise HostError(
                NOT_ATTACHED_MESSAGE.format(
                    callback=type(self).__name__, trainer=self.trainer_name, host=self.host_class.__name__
                )
            )
        trainer = self.trainer
        check_prompt_positions(trainer)
        self.summary.reset()
        if state.is_world_process_zero:
            line = self.strategy.summary_line(self._domains_seen, self.domain_key)
            if not self.strategy.is_noop:
                line += "; selects on " + selection_reward_text(
                    self.options.selection_reward, trainer.reward_func_names, trainer.reward_weights
                )
            print(line, flush=True)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        # TRL averages its loss-side metrics over the step's kept tokens; a step that kept none gives None
        # (clip_ratio/low_min, ...), which every logger then reports as a bad value. Nothing was measured: leave
        # those metrics out of the step's logs (TRL logs right after this hook).
        decision = self.last_decision
        if decision is not None and decision.metrics.get("dropped_all"):
            metrics = self.trainer._metrics["train"]
            for name in [name for name, values in metrics.items() if values and all(math.isnan(v) for v in values)]:
                del metrics[name]
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            print(self.summary.line(self.strategy.name), flush=True)
        return control

    # ------------------------------------------------------------------ rollout side
    def calculate_rewards(self, trainer, original: Callable, *args, **kwargs) -> torch.Tensor:
        """Wraps ``_calculate_rewards``: keep the ``(N_global, F)`` gathered rewards; a `ZeroRewardWatch` reads the
        first steps' (a `ZeroRewardWarning` when none paid)."""
        rewards_per_func = original(*args, **kwargs)
        self._gathered_rewards = rewards_per_func
        if trainer.model.training:  # gathered from every rank: each reaches the same verdict, the main one warns
            self.zero_rewards.observe(
                rewards_per_func, trainer.state.global_step, warn=trainer.accelerator.is_main_process
            )
        return rewards_per_func

    def score_completions(self, trainer, original: Callable, inputs: list) -> dict:
        """Wraps ``_generate_and_score_completions``: decide on the global batch, mask the local rows."""
        if not trainer.model.training:
            return original(inputs)
        scored = lambda round_inputs: self._scored_round(original, round_inputs)  # noqa: E731
        if self.allocation is not None:  # the allocator's rounds replace TRL's generation of its batch
            real, output, self._gathered_rewards, group_ids, extra = self.allocation.generate(trainer, scored, inputs)
            padded = None if group_ids is None else len(inputs)  # groups of different sizes: fillers up to TRL's rows
            self._apply_strategy(trainer, real, output, extra_metrics=extra, padded_rows=padded, group_ids=group_ids)
            self._gathered_rewards = None
            return output
        if self.fewer is not None:  # only the prompts pre_select keeps are generated; fillers keep TRL's shapes
            kept = self.fewer.choose(trainer, inputs)
            output, self._gathered_rewards = self._scored_round(original, kept)
            extra = self.fewer.step_metrics(trainer)
            self._apply_strategy(trainer, kept, output, extra_metrics=extra, padded_rows=len(inputs))
            self._gathered_rewards = None
            return output
        output, rewards_per_func = self._scored_round(original, inputs)
        signal, dynamic_metrics = None, None
        if self.dynamic is not None:
            judge = lambda *round: self._rollout_batch(trainer, *round)[0]  # noqa: E731
            inputs, output, rewards_per_func, signal, taken = self.dynamic.generate(
                trainer, scored, inputs, output, rewards_per_func, judge
            )
            signal = signal.to(rewards_per_func.device) if taken.short else None
            dynamic_metrics = taken.metrics
        self._gathered_rewards = rewards_per_func
        self._apply_strategy(trainer, inputs, output, signal=signal, extra_metrics=dynamic_metrics)
        self._gathered_rewards = None
        return output

    def _scored_round(self, original: Callable, inputs: list) -> tuple[dict, torch.Tensor]:
        """TRL's own scoring of ``inputs``: its batch dict and the ``(N_global, F)`` rewards it gathered."""
        self._gathered_rewards = None
        output = original(inputs)
        if self._gathered_rewards is None:
            raise HostError(
                "dataflex: TRL produced a batch without calling _calculate_rewards, so the adapter has no rewards to "
                "select on. This TRL code path (custom rollout?) is not supported by the TRL adapter."
            )
        rewards_per_func, self._gathered_rewards = self._gathered_rewards, None
        return output, rewards_per_func

    def _rollout_batch(self, trainer, inputs: list, output: dict, rewards_per_func: torch.Tensor):
        """The global `RolloutBatch` of one scored batch, and its ``(N,)`` selection rewards."""
        accelerator = trainer.accelerator
        tool_mask = output.get("tool_mask")
        loss_mask = output["completion_mask"] if tool_mask is None else output["completion_mask"] * tool_mask
        rewards = selection_rewards(rewards_per_func, trainer.reward_weights, self._reward_index)
        has_domains = len(inputs) > 0 and self.domain_key in inputs[0]
        domains = [row[self.domain_key] for row in inputs] if has_domains else None
        prompt_keys = [row_key(row, self.options.prompt_key_column) for row in inputs]
        wants_ids = self.strategy.wants_completion_ids
        batch = global_rollout_batch(
            accelerator,
            rewards,
            trainer.num_generations,
            loss_mask,
            output["advantages"],
            domains,
            prompt_keys,
            completion_ids=output["completion_ids"] if wants_ids else None,
        )
        return batch, rewards

    def _apply_strategy(
        self,
        trainer,
        inputs: list,
        output: dict,
        signal: torch.Tensor | None = None,
        extra_metrics: dict | None = None,
        padded_rows: int | None = None,
        group_ids: torch.Tensor | None = None,
    ) -> None:
        """Decide on the global batch and write the decision into this rank's rows of ``output``.

        ``signal`` ``(N,)`` bool, when given, drops the rows outside it too (zero-signal groups
        filling a short dynamic-sampling step); ``extra_metrics`` are logged and recorded with the decision's;
        ``padded_rows``: ``output`` (kept groups, or groups of ``group_ids (N,)``) is filled up to these rows here.
        """
        accelerator = trainer.accelerator
        batch, rewards = self._rollout_batch(trainer, inputs, output, self._gathered_rewards)
        if group_ids is not None:
            batch = dataclasses.replace(batch, group_ids=group_ids.to(batch.rewards.device))
        strategy = self.strategy
        # With the mixing sampler installed, the sampler reports each draw itself.
        if strategy.mix_enabled and batch.domains is not None and self.sampler is None:
            prompt_domains = batch.domains[:: trainer.num_generations]
            strategy.observe_sampled(dict(Counter(prompt_domains)))
        step = int(trainer.state.global_step)
        # Seeded from (seed, step): any CPU randomness in the strategy is identical on every rank, and TRL's own CPU
        # random stream (shuffling) is kept as without the adapter; TRL logs this step as global_step + 1 (messages too)
        decision = decide(
            strategy,
            batch,
            step,
            seed=int(trainer.args.seed),
            warn=accelerator.is_main_process,
            defer_policy=strategy.needs_policy_signals,
            host_step=step + 1,
        )
        if signal is not None:
            decision = restrict_rows(decision, signal.to(decision.keep.device))
        prompt_keys = list(batch.prompt_keys)
        if padded_rows is not None:  # masked filler rows up to TRL's, in groups of their own
            loss = strategy.config.fewer_groups_loss  # full or batch: how the fillers count in the loss
            decision, batch, rewards = fill_rows(trainer, output, padded_rows, decision, batch, loss)
        self.write_decision(trainer, output, decision, batch, rewards)
        self.last_decision = decision
        self.summary.update(batch, decision)
        self.summary.end_step()
        if self.options.record_decisions:
            self.decisions.append(
                {
                    "step": step,
                    "keep": decision.keep.detach().cpu(),
                    "weights": decision.weights.detach().cpu(),
                    "metrics": dict(decision.metrics),
                    "prompt_keys": prompt_keys,
                    "rewards": rewards.detach().cpu(),
                    "dynamic": dict(extra_metrics or {}),
                }
            )
        metrics = trainer._metrics["train"]
        for name, value in {**decision.metrics, **(extra_metrics or {})}.items():
            metrics[f"dataflex/{name}"].append(float(value))
        # The completion tokens left in the loss, all processes: `dataflex compare`'s trained tokens.
        metrics["dataflex/kept_tokens"].append(float(output["num_items_in_batch"]))

    def write_decision(self, trainer, output: dict, decision, batch, rewards: torch.Tensor) -> None:
        """Fold a global decision into this rank's rows of TRL's batch dict (in place).

        Args:
            trainer: the TRL trainer.
            output: TRL's batch dict for this rank (``completion_mask`` ``(B, T)``, ...).
            decision: the strategy's decision over all ``N`` rows of every rank.
            batch: the global `RolloutBatch` the decision was made on (its ``group_ids`` and
                ``valid_mask`` are used).
            rewards: ``(N,)`` selection rewards.
        """
        accelerator = trainer.accelerator
        tool_mask = output.get("tool_mask")
        loss_mask = output["completion_mask"] if tool_mask is None else output["completion_mask"] * tool_mask
        num_local, num_tokens = loss_mask.shape
        rows = slice(accelerator.process_index * num_local, (accelerator.process_index + 1) * num_local)
        device = loss_mask.device
        local = local_decision(decision, rows, num_tokens)
        keep = local.keep.to(device=device, dtype=torch.bool)
        weights = local.weights.to(device=device, dtype=torch.float32)
        # Not the validity mask: remove_dropped multiplies this into tool_mask, which must stay 1 wherever it was.
        token_keep = kept_token_mask(local, torch.ones(num_local, num_tokens, dtype=torch.bool, device=device))
        self.remove_dropped(output, keep, token_keep)
        kept_tokens = (loss_mask * token_keep.to(loss_mask.dtype)).sum()
        if accelerator.num_processes > 1:
            kept_tokens = accelerator.gather(kept_tokens).sum()
        output["num_items_in_batch"] = kept_tokens + output.get(FILLER_TOKENS_KEY, 0.0)  # fewer_groups_loss: batch
        output[KEEP_KEY] = keep
        output[WEIGHTS_KEY] = weights
        output[REWARDS_KEY] = rewards[rows].to(device)
        output[GROUP_IDS_KEY] = batch.group_ids[rows].to(device)
        if local.response_weights is not None:
            output[RESPONSE_WEIGHTS_KEY] = local.response_weights.to(device=device, dtype=torch.float32)

        # Decided on the global tensors, so every rank takes the same branch in the loss.
        self._weighted = decision.weighted(batch.valid_mask)

    # ------------------------------------------------------------------ loss side
    def compute_loss(self, trainer, original: Callable, model, inputs: dict) -> torch.Tensor:
        """Wraps ``_compute_loss``: rescale so masking equals removing the dropped rows."""
        if KEEP_KEY not in inputs:
            return original(model, inputs)
        self._loss_inputs = inputs
        try:
            loss = original(model, inputs)
        finally:
            self._loss_inputs = None
        aggregation = self.loss_aggregation(trainer)
        if aggregation in ROW_NORMALISED:
            keep = inputs[KEEP_KEY]
            scale = inputs.get(STEP_SCALE_KEY)  # a step of fewer groups: the mean over its kept rows
            if scale is None:
                scale = removal_scale(aggregation, keep.numel(), keep.sum())
            loss = loss * scale.to(device=loss.device, dtype=loss.dtype)
        return loss

    def per_token_logps(self, trainer, original: Callable, *args, **kwargs):
        """Wraps ``_get_per_token_logps_and_entropies``: inside the loss, weight the gradient per token."""
        logps, entropies, aux_loss = original(*args, **kwargs)
        inputs = self._loss_inputs
        if inputs is None:  # old/reference log-probs at rollout time, or evaluation
            return logps, entropies, aux_loss
        weights = None
        decision = self.last_decision
        if getattr(decision, "deferred", False):
            mask = inputs["completion_mask"] * inputs["tool_mask"]
            policy_batch = local_policy_batch(
                inputs[REWARDS_KEY], inputs[GROUP_IDS_KEY], mask, inputs["advantages"], logps, entropies
            )
            local = micro_batch_decision(
                decision, inputs[KEEP_KEY], inputs[WEIGHTS_KEY], inputs.get(RESPONSE_WEIGHTS_KEY)
            )
            policy_decision = self.strategy.apply_policy(policy_batch, local, warn=trainer.accelerator.is_main_process)
            weights = policy_decision.weights
            metrics = trainer._metrics["train" if trainer.model.training else "eval"]
            for name in ("weight_mean", "weight_std", "weight_max", "ess"):
                if name in policy_decision.metrics:
                    metrics[f"dataflex/token/{name}"].append(float(policy_decision.metrics[name]))
        elif self._weighted:
            weights = inputs[WEIGHTS_KEY]
        if weights is not None:
            logps = scale_gradient(logps, weights.detach())
        return logps, entropies, aux_loss

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_parts(self) -> dict[str, Any]:
        """The mixing sampler's, dynamic sampling's and allocation's state, beside the strategy's."""
        parts = {}
        if self.sampler is not None:
            parts["sampler"] = self.sampler.state_dict()
        if self.dynamic is not None:
            parts["dynamic"] = self.dynamic.state_dict()
        if self.allocation is not None:
            parts["allocation"] = self.allocation.state_dict()
        return parts

    def restore_parts(self, saved: Mapping[str, Any], folder: str) -> None:
        if self.dynamic is not None and saved.get("dynamic") is not None:
            self.dynamic.load_state_dict(saved["dynamic"])
        if self.allocation is not None and saved.get("allocation") is not None:
            self.allocation.load_state_dict(saved["allocation"])
        sampler_state = saved.get("sampler")
        if sampler_state is not None and acts_before_rollout(self.strategy):
            # HF Trainer builds the dataloader before loading the checkpoint; keep the state if it did not.
            self._pending_sampler_state = sampler_state
            self._restore_sampler()
        elif acts_before_rollout(self.strategy):
            warnings.warn(
                f"dataflex: checkpoint {folder} has no sampler state (saved before the mixing sampler was wired?); "
                "prompt sampling restarts from a fresh stream.",
                stacklevel=user_stacklevel(),
            )

    def _restore_sampler(self) -> None:
        if self.sampler is not None and self._pending_sampler_state is not None:
            state, self._pending_sampler_state = self._pending_sampler_state, None
            if self.options.strict:
                try:
                    self.sampler.load_state_dict(state)
                except ConfigError as error:  # the core names its own setting; say which TRL setting differs
                    if getattr(error, "sampler_setting", None) is None or self.trainer is None:
                        raise
                    raise ConfigError(sampler_resume_message(self.trainer, error)) from error
                return
            try:
                self.sampler.load_state_dict(state)
            except (ValueError, KeyError, TypeError) as error:  # strict=False: a changed mix may not fit the old stream
                warnings.warn(
                    f"dataflex: strict=False: the saved sampler state does not fit this run ({error}); "
                    "prompt sampling restarts from a fresh stream.",
                    stacklevel=user_stacklevel(),
                )

    # ------------------------------------------------------------------ sampling
    def train_sampler(self, trainer, original: Callable, dataset=None):
        """Wraps ``_get_train_sampler``: a `DomainMixingSampler` when the strategy chooses prompts before rollout.

        A ``mix`` part or a refilling ``pre_select`` part gets a sampler with TRL's ``RepeatSampler`` layout, driven by
        the strategy (`sampling.grpo_mixing_sampler`); any other strategy keeps TRL's sampler (the baseline's stream).
        """
        if not acts_before_rollout(self.strategy) or self.fewer is not None:
            return original(dataset)
        dataset = trainer.train_dataset if dataset is None else dataset
        self.sampler = grpo_mixing_sampler(
            trainer, dataset, self.strategy, self.domain_key, self.options.prompt_key_column
        )
        self._restore_sampler()
        return self.sampler
