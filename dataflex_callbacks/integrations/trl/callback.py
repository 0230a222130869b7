"""`DataFlexCallback`: a data strategy applied inside a TRL trainer (``GRPOTrainer``; `rloo` adds ``RLOOTrainer``).

A plain ``TrainerCallback`` never sees rewards or advantages, so the callback works through
six trainer methods (`HOOKS`: wrapped by `attach`, overridden by `DataFlexTrainerMixin`):

- ``_calculate_rewards``: remember the rewards TRL gathered from every process;
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

The callback hooks themselves log nothing extra: metrics go into TRL's own ``_metrics``, so
they appear in TRL's logs (``dataflex/kept_frac``, ``dataflex/kept_tokens``, ``dataflex/mix/target/<domain>``,
``dataflex/pre_select/skipped_prompts``, ...) on every logging step, and the strategy and
sampler states are written into each checkpoint folder by ``on_save``.

What differs between TRL trainers is declared on the callback class, so a host is a small
subclass: `DataFlexCallback.host_class` and ``trainer_name`` (which trainer, named in messages),
`DataFlexCallback.loss_aggregation` (how the loss is normalised), and
`DataFlexCallback.remove_dropped` (how a dropped row leaves the loss).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Optional

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from dataflex_callbacks.config.fields import config_field
from dataflex_callbacks.host.context_length import check_context_length
from dataflex_callbacks.metrics import RunSummary
from dataflex_callbacks.errors import (
    SELECTION_REWARD,
    ConfigError,
    HostError,
    ParamError,
    WrongHostError,
    user_stacklevel,
)
from dataflex_callbacks.host import (
    ROW_NORMALISED,
    acts_before_rollout,
    as_strategy,
    checkpoint_state,
    decide,
    grpo_fields,
    kept_token_mask,
    local_decision,
    micro_batch_decision,
    read_state_file,
    removal_scale,
    resolve_domain_key,
    restore_strategy,
    restrict_rows,
)

from .allocation import Allocation, check_allocation
from .dynamic import DynamicSampling, check_dynamic_sampling
from .loss_scaling import can_drop_rows, check_loss_type, scale_gradient
from .sampling import DEFAULT_DOMAIN_SOURCE, check_sampling_dataset, check_shuffle, grpo_mixing_sampler, row_key
from .signals import (
    global_rollout_batch,
    local_policy_batch,
    longest_prompt_tokens,
    resolve_reward_index,
    selection_reward_text,
    selection_rewards,
)
from .train_data import check_enough_prompts, check_stream, is_stream, sampler_resume_message

STATE_FILE = "dataflex_strategy.pt"
"""File name of the strategy (and sampler) state inside each ``checkpoint-<step>`` folder."""

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


@dataclass(frozen=True)
class AdapterOptions:
    """The TRL adapter's options, each written once here with its default and help.

    Give them as keyword arguments wherever the strategy goes in: ``attach(trainer, strategy,
    **options)``, ``DataFlexGRPOTrainer(..., strategy=..., **options)`` (RLOO and async alike) or
    ``DataFlexCallback(strategy, **options)``; the callback keeps them as ``callback.options``.
    ``field_help(AdapterOptions, "strict")`` reads a field's help.
    """

    selection_reward: Optional[str] = config_field(
        None,
        help='reward function the strategy scores on, by name (`"accuracy"`); '
        "`None` = TRL's weighted sum of all reward functions. An unknown name is an error listing the "
        "trainer's reward functions.",
    )
    domain_key: Optional[str] = config_field(
        None,
        help="dataset column with each prompt's domain (per-domain reward metrics, mixing). `None`: the strategy "
        "config's `domain_key` when it sets one (so a DataFlex-RL YAML means the same column as in verl and "
        'Lightning), else `"domain"`. Giving both with different names is an error.',
    )
    prompt_key_column: Optional[str] = config_field(
        None,
        help="dataset column with a stable prompt id (default: the `prompt_key` column if present, else the "
        "prompt); the mixing sampler and the rollout batch use the same key",
    )
    record_decisions: bool = config_field(
        False,
        help="keep every decision in `callback.decisions` (on CPU), for tests and analysis; the asynchronous "
        "callback also keeps each consumed sample's staleness in `callback.consumed_staleness`",
    )
    strict: bool = config_field(
        True,
        help="on `resume_from_checkpoint`, refuse a checkpoint saved with a different strategy config; "
        "`strict=False` restores only the mixing and pre-rollout state (and starts a fresh prompt stream "
        "if the saved one does not fit)",
    )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name, in declaration order."""
        return tuple(option.name for option in dataclasses.fields(cls))

    @classmethod
    def check_names(cls, given: Mapping[str, Any], where: str, also: Collection[str] = (), also_text: str = "") -> None:
        """Refuse, naming the valid options, a name in ``given`` that is no option; ``where`` names the call.

        ``also``: further names the call takes (a TRL trainer's own arguments), described by ``also_text``.
        """
        unknown = [name for name in given if name not in cls.names() and name not in also]
        if unknown:
            raise ParamError(
                f"dataflex: {where} got an unknown option {unknown[0]!r}; the options are "
                f"{', '.join(cls.names())} (AdapterOptions)" + (f" and {also_text}" if also else ""),
                param=unknown[0],
            )

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The options among a trainer's keyword arguments, taken out of ``kwargs`` (the rest go to TRL)."""
        return {name: kwargs.pop(name) for name in cls.names() if name in kwargs}

    def updated(self, given: Mapping[str, Any], where: str) -> "AdapterOptions":
        """These options with those in ``given`` changed (each name checked, see `check_names`)."""
        self.check_names(given, where)
        return dataclasses.replace(self, **given)


def save_into_checkpoint(callback, args, state) -> None:
    """``callback.save_state(folder)`` into the checkpoint folder TRL has just written (main process only);
    the ``on_save`` of the synchronous and the asynchronous callbacks."""
    if state.is_world_process_zero:
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if os.path.isdir(folder):
            callback.save_state(folder)


class DataFlexCallback(TrainerCallback):
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

    trainer_name = "DataFlexGRPOTrainer"
    """The DataFlex trainer class for this host, named in error messages."""

    exact_removal_advice = "Use loss_type='dapo' or 'bnpo' for exact equivalence."
    """How to make dropping rows exactly equal to removing them when an extra loss term is rescaled by B/K."""

    supports_dynamic_sampling = True
    """Whether this host runs a strategy's ``dynamic_sampling`` part (`dynamic.DynamicSampling`)."""

    @property
    def host_settings(self) -> dict[str, str]:
        """How this adapter spells the settings the core's warnings name (`dataflex_callbacks.host.decide`)."""
        return {
            SELECTION_REWARD: f"{self.trainer_name}(..., selection_reward=<one of the trainer's reward_func_names>)"
            " or attach(trainer, strategy, selection_reward=...)"
        }

    def __init__(self, strategy: Any, **options: Any):
        self.options = AdapterOptions().updated(options, f"{type(self).__name__}(...)")
        self.strategy = as_strategy(strategy)
        self.dynamic: Optional[DynamicSampling] = self._dynamic_sampling()
        self.allocation: Optional[Allocation] = self._allocation()
        self.domain_key = self.options.domain_key  # the column; resolved against the config's domain_key in bind()
        self.decisions: list[dict[str, Any]] = []
        self.last_decision = None
        self.trainer = None
        self._domains_seen: Optional[list[str]] = None
        self._reward_index: Optional[int] = None
        self._gathered_rewards: Optional[torch.Tensor] = None
        self._weighted = False
        self._loss_inputs: Optional[dict] = None
        self.sampler = None  # the DomainMixingSampler installed in _get_train_sampler, if any
        self._pending_sampler_state: Optional[dict] = None
        self.summary = RunSummary()  # what the strategy kept, printed at train end

    @classmethod
    def check_strategy(cls, strategy: Any) -> None:
        """Refuse, in one line, a strategy this trainer cannot run whatever its data (``dataflex validate --host trl``).

        The rules that need the trainer or its dataset run when the callback is attached (`bind`).
        """
        strategy = as_strategy(strategy)
        if strategy.config.dynamic_sampling is not None:
            if not cls.supports_dynamic_sampling:
                raise ConfigError(
                    f"dynamic_sampling is not supported by the TRL adapter's {cls.trainer_name} yet; "
                    "remove the dynamic_sampling part or use the core SignalGroupBuffer in your own "
                    "loop (docs/dynamic_sampling.md)"
                )
            check_dynamic_sampling(None, strategy)  # no trainer: the rules on the strategy alone
        if strategy.allocation is not None:
            if not cls.supports_dynamic_sampling:
                raise ConfigError(
                    f"allocation is not supported by the TRL adapter's {cls.trainer_name} yet; remove the "
                    "allocation part, or use DataFlexGRPOTrainer or the core AllocationRounds in your own loop "
                    "(docs/allocation.md)"
                )
            check_allocation(None, strategy)
        strategy.check_host(grpo_fields(domains=True), host=f"the TRL {cls.host_class.__name__}")

    def _dynamic_sampling(self) -> Optional[DynamicSampling]:
        """The dynamic-sampling loop when the strategy has the part; refused by hosts that cannot run it."""
        self.check_strategy(self.strategy)
        if self.strategy.config.dynamic_sampling is None:
            return None
        return DynamicSampling(self.strategy)

    def _allocation(self) -> Optional[Allocation]:
        """The screening rounds when the strategy has an allocation part (checked by `check_strategy`)."""
        return None if self.strategy.allocation is None else Allocation(self.strategy)

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
    @property
    def attached(self) -> bool:
        """True once the callback is bound to a trainer (by `attach` or a DataFlex trainer)."""
        return self.trainer is not None

    def bind(self, trainer) -> None:
        """Check the trainer's configuration against the strategy and remember the trainer."""
        if not isinstance(trainer, self.host_class):
            raise WrongHostError(
                f"dataflex: {type(self).__name__} works with trl.{self.host_class.__name__}; got "
                f"{type(trainer).__name__}. attach(trainer, strategy) picks the callback for a TRL GRPOTrainer or "
                "RLOOTrainer; for other trainers use the Lightning or verl adapters, or the core API directly."
            )
        if self.trainer is not None and self.trainer is not trainer:
            raise HostError(
                f"dataflex: this {type(self).__name__} is already attached to another trainer; create a new one."
            )
        aggregation = self.loss_aggregation(trainer)
        self._reward_index = resolve_reward_index(self.options.selection_reward, trainer.reward_func_names)
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
        check_shuffle(trainer, self.strategy)
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
        if self.strategy.mix_enabled and self.strategy.domains is None and "domains" in available:
            self.strategy.bind_domains(self._domains_seen)
        if self.dynamic is None or self.dynamic.strategy is not self.strategy:  # attach() may replace the strategy
            self.dynamic = self._dynamic_sampling()
        if self.dynamic is not None:
            self.dynamic.bind(trainer, self.domain_key, self.options.prompt_key_column)
        if self.allocation is None or self.allocation.strategy is not self.strategy:
            self.allocation = self._allocation()
        if self.allocation is not None:
            self.allocation.bind(trainer, self.domain_key, self.options.prompt_key_column, self._reward_index)
        self.strategy.bind_host_settings(self.host_settings)
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
        """Wraps ``_calculate_rewards``: keep the ``(N_global, F)`` gathered rewards."""
        rewards_per_func = original(*args, **kwargs)
        self._gathered_rewards = rewards_per_func
        return rewards_per_func

    def score_completions(self, trainer, original: Callable, inputs: list) -> dict:
        """Wraps ``_generate_and_score_completions``: decide on the global batch, mask the local rows."""
        if not trainer.model.training:
            return original(inputs)
        if self.allocation is not None:  # screening rounds replace TRL's generation of its batch
            score_round = lambda round_inputs: self._scored_round(original, round_inputs)  # noqa: E731
            inputs, output, rewards_per_func, metrics = self.allocation.generate(trainer, score_round, inputs)
            self._gathered_rewards = rewards_per_func
            self._apply_strategy(trainer, inputs, output, extra_metrics=metrics)
            self._gathered_rewards = None
            return output
        output, rewards_per_func = self._scored_round(original, inputs)
        signal, dynamic_metrics = None, None
        if self.dynamic is not None:
            score_round = lambda round_inputs: self._scored_round(original, round_inputs)  # noqa: E731
            judge = lambda *round: self._rollout_batch(trainer, *round)[0]  # noqa: E731
            inputs, output, rewards_per_func, signal, taken = self.dynamic.generate(
                trainer, score_round, inputs, output, rewards_per_func, judge
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
        pre_select = self.strategy.pre_select
        wants_ids = pre_select is not None and getattr(pre_select, "noise_check", False)
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
        signal: Optional[torch.Tensor] = None,
        extra_metrics: Optional[dict] = None,
    ) -> None:
        """Decide on the global batch and write the decision into this rank's rows of ``output``.

        ``signal`` ``(N,)`` bool, when given, drops the rows outside it too (zero-signal groups
        filling a short dynamic-sampling step); ``extra_metrics`` are logged and recorded with the decision's.
        """
        accelerator = trainer.accelerator
        batch, rewards = self._rollout_batch(trainer, inputs, output, self._gathered_rewards)
        strategy = self.strategy
        # With the mixing sampler installed, the sampler reports each draw itself.
        if strategy.mix_enabled and batch.domains is not None and self.sampler is None:
            prompt_domains = batch.domains[:: trainer.num_generations]
            strategy.observe_sampled(dict(Counter(prompt_domains)))
        step = int(trainer.state.global_step)
        # Seeded from (seed, step): any CPU randomness in the strategy is identical on every rank, and
        # TRL's own CPU random stream (shuffling) is left exactly as in a run without the adapter.
        # TRL logs this step as global_step + 1 (the counter moves after the optimizer step): messages say so too.
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
                    "prompt_keys": list(batch.prompt_keys),
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
        output["num_items_in_batch"] = kept_tokens
        output[KEEP_KEY] = keep
        output[WEIGHTS_KEY] = weights
        output[REWARDS_KEY] = rewards[rows].to(device)
        output[GROUP_IDS_KEY] = batch.group_ids[rows].to(device)
        if local.response_weights is not None:
            output[RESPONSE_WEIGHTS_KEY] = local.response_weights.to(device=device, dtype=torch.float32)

        # Decided on the global tensors, so every rank takes the same branch in the loss.
        full_weights = decision.weights
        keep_float = decision.keep.to(full_weights.dtype)
        if full_weights.dim() == 2:
            valid = batch.valid_mask.to(full_weights.device)
            keep_float = keep_float.unsqueeze(1).expand_as(full_weights)
            full_weights = torch.where(valid, full_weights, keep_float)
        self._weighted = bool((full_weights != keep_float).any())

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
    def on_save(self, args, state, control, **kwargs):
        save_into_checkpoint(self, args, state)
        return control

    def save_state(self, folder: str) -> str:
        """Write the strategy state (and the mixing sampler's, when installed) into a checkpoint folder."""
        path = os.path.join(folder, STATE_FILE)
        parts = {}
        if self.sampler is not None:
            parts["sampler"] = self.sampler.state_dict()
        if self.dynamic is not None:
            parts["dynamic"] = self.dynamic.state_dict()
        if self.allocation is not None:
            parts["allocation"] = self.allocation.state_dict()
        torch.save(checkpoint_state(self.strategy, **parts), path)
        return path

    def load_state(self, folder: str, weights_only: bool = True) -> bool:
        """Restore the strategy (and sampler) state from a checkpoint folder; False (with a warning) when it has none.

        The file is read with ``torch.load(weights_only=True)``, the safe loading TRL and torch use
        by default; ``weights_only=False`` reads a trusted file written by an older version that
        stored numpy values.
        """
        saved = read_state_file(folder, STATE_FILE, weights_only=weights_only, saved_by="the DataFlex adapter")
        if saved is None:
            return False
        writer = f"{self.trainer_name} or attach()"
        restore_strategy(
            self.strategy,
            saved,
            source=folder,
            strict=self.options.strict,
            writer=writer,
            strict_setting=f"{self.trainer_name}(..., strict=False) or attach(trainer, strategy, strict=False)",
        )
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
        return True

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

    def load_optimizer_and_scheduler(self, trainer, original: Callable, checkpoint: Optional[str]) -> None:
        """Wraps ``_load_optimizer_and_scheduler``: the one trainer hook that receives the resume checkpoint."""
        original(checkpoint)
        if checkpoint is not None:
            self.load_state(checkpoint)

    # ------------------------------------------------------------------ sampling
    def train_sampler(self, trainer, original: Callable, dataset=None):
        """Wraps ``_get_train_sampler``: a `DomainMixingSampler` when the strategy chooses prompts before rollout.

        A strategy with a ``mix`` part (domain proportions) or a ``pre_select`` part (skip prompts
        predicted to give no signal) gets a sampler with TRL's ``RepeatSampler`` layout, driven
        by the strategy (see `sampling.grpo_mixing_sampler`); any other strategy keeps TRL's sampler.
        """
        if not acts_before_rollout(self.strategy):
            return original(dataset)
        dataset = trainer.train_dataset if dataset is None else dataset
        self.sampler = grpo_mixing_sampler(
            trainer, dataset, self.strategy, self.domain_key, self.options.prompt_key_column
        )
        self._restore_sampler()
        return self.sampler


def check_prompt_positions(trainer) -> None:
    """Refuse, at train start, a train dataset whose longest prompt plus ``max_completion_length`` exceeds the
    model's ``max_position_embeddings`` (a `ContextLengthError` naming both numbers).

    Past the model's positions every completion is cut or generated on positions it never learned, and
    transformers only logs a reminder. A stream is not read ahead, and a model whose config names no
    positions is not checked.
    """
    dataset = getattr(trainer, "train_dataset", None)
    config = getattr(getattr(trainer, "model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    completion = getattr(trainer.args, "max_completion_length", None)
    if not positions or completion is None or is_stream(dataset) or "prompt" not in (dataset.column_names or []):
        return
    longest = longest_prompt_tokens(trainer, dataset["prompt"])
    if longest is None:
        return
    check_context_length(
        longest,
        int(completion),
        int(positions),
        prompts="the train dataset",
        setting=f"max_completion_length ({type(trainer.args).__name__}, now {int(completion)})",
    )


def check_callback_host(callback: DataFlexCallback, trainer, wanted: type) -> None:
    """Refuse a callback in ``callbacks=[...]`` that serves another TRL trainer; the error names ``wanted``."""
    if not isinstance(trainer, callback.host_class):
        raise WrongHostError(
            f"dataflex: callbacks=[...] holds a {type(callback).__name__}, which is for "
            f"trl.{callback.host_class.__name__}; this {type(trainer).__name__} needs "
            f"{wanted.__name__}(strategy, ...), "
            "or no callback and the strategy given once (strategy=... on a DataFlex trainer, or "
            "attach(trainer, strategy))."
        )
