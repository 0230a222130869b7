"""Data strategies inside TRL's ``trl.experimental.async_grpo.AsyncGRPOTrainer`` (generation runs ahead of the trainer).

Where the strategy acts (TRL 1.16, ``async_grpo_trainer.py``):

- *consumed samples*: the trainer drains its rollout queue through ``RolloutQueueDataset``
  (which drops samples older than ``max_staleness`` policy versions) into a batcher and TRL's
  packing collator. `DataFlexAsyncCallback` puts a stage between the two (`ConsumedSamples`):
  it takes B whole groups (one step's worth: ``per_device_train_batch_size x
  gradient_accumulation_steps x processes / num_generations``), builds their `RolloutBatch`
  (with each sample's policy version and the trainer's version now), decides, and passes on
  the kept samples only, each with its advantage times its weight (TRL's clipped loss is linear
  in a non-negative factor on the advantage, so this is the weighted loss). A dropped sample is
  removed as TRL removes a stale one: the batcher fills its place from the queue, so every
  step trains on its full sample count and a micro-batch's loss is TRL's loss on its kept rows.
- *dynamic sampling*: the stage keeps taking groups from the queue until it holds B groups that
  carry signal; the zero-signal ones are counted as spent (``dataflex/dynamic/*_window_total``,
  sums over TRL's logging window). Nothing is ever generated for it: the worker's stream is the
  same as without the strategy.
- *a step without signal ends*: decisions that keep nothing are replaced from the queue for at most
  ``max_rounds`` x B groups (the ``dynamic_sampling`` part's, its default without one), as the
  synchronous trainer bounds its rounds; then B of them go on masked out (advantage 0, so TRL's
  loss on them is 0), counted in ``dataflex/no_signal_steps_window_total``, with a
  `NoSignalStepWarning` naming the cause and the fix.
- *short groups*: a worker queues a group's samples together, so a group ends at
  ``num_generations`` samples or when the next group's first sample arrives. A short group (TRL's
  worker will emit them after cancelled or failed rollouts) is decided on with what it has, never
  waited for (``dataflex/short_groups_window_total``).
- *prompts* (``mix`` and ``pre_select``): the worker must take its prompts from a feed
  (`async_rollout.InProcessRolloutWorker.set_prompt_feed`); the feed is a `DomainMixingSampler`
  driven by the strategy, so a prompt it skips is never sent to the engine. TRL's own
  ``AsyncRolloutWorker`` reads the dataset in order in a child process: refused at attach.
- *staleness*: every sample taken from the queue is recorded, with its domain, its staleness and
  whether TRL dropped it as stale; `dataflex_callbacks.metrics.DomainStalenessStats` logs the
  per-domain shares and warns once when one domain loses far more to the limit than the others.
  An outcome dropped as stale still updates the pre-rollout filter's history, at the next step.

The line printed at train end counts, for every strategy, the groups each step took from the queue
(those TRL dropped as stale aside): the groups decided on, refills of a decision that kept nothing, and
the zero-signal groups dynamic sampling set aside (as groups not kept).

Refused at attach, in one line naming the part: token-level select or reweight parts, and parts
scoring the current policy inside the loss (TRL packs one advantage per sample and exposes no
per-token hook), and ``mix``/``pre_select`` with a worker that takes no prompt feed. Also refused,
naming the fix: a second attach, a worker whose ``num_generations`` differs from the config's,
``token_budget=None`` with `async_rollout.InProcessRolloutWorker` (TRL would wait for a vLLM server), and
a ``mix`` part on data without its domain column (naming ``domain_key``, the column and the data's
columns, as the synchronous adapter). While training, a policy version that is not an int from 0 to
2**63 - 1 (the trainer's or a sample's) is a `BatchError` (`async_queue.check_policy_version`).
"""

from __future__ import annotations

import collections
import inspect
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from dataflex_callbacks.config.fields import DynamicSamplingConfig
from dataflex_callbacks.errors import (
    ConfigError,
    HostError,
    NoSignalStepWarning,
    WrongHostError,
    user_stacklevel,
)
from dataflex_callbacks.host import acts_before_rollout, decide, prompt_choosing_parts, resolve_domain_key
from dataflex_callbacks.host.zero_rewards import ZeroRewardWatch
from dataflex_callbacks.metrics import DomainStalenessStats
from dataflex_callbacks.rollout.batch import NO_DOMAIN, RolloutBatch
from dataflex_callbacks.rollout.decision import Decision
from dataflex_callbacks.rollout.groups import every_group_equal
from dataflex_callbacks.sampling.dynamic_sampling import signal_rows
from dataflex_callbacks.sampling.sampler import DomainMixingSampler, domain_labels

from .async_host import async_fields, async_trainer_class, check_async_strategy, is_async_trainer
from .async_queue import ConsumedSamples, QueueArrivals, check_policy_version
from .async_rollout import InProcessRolloutWorker, cpu_device_name, use_cpu_tree_attention
from .lifecycle import StrategyCallback
from .options import AdapterOptions
from .sampling import check_sampling_dataset, row_key
from .signals import resolve_reward_index, selection_reward_text


class DataFlexAsyncCallback(StrategyCallback):
    """Apply a data strategy to the samples a TRL ``AsyncGRPOTrainer`` consumes, and to the prompts its worker is fed.

    Use it through `attach(trainer, strategy)` or `DataFlexAsyncGRPOTrainer(..., strategy=...)`
    (module docstring: where each part acts).

    Args:
        strategy: a `Strategy`, preset name, config dict or YAML path.
        **options: the adapter's options, `options.AdapterOptions`, kept as ``self.options``; the
            selection reward is read from each sample's metrics (TRL's weighted sum: its ``reward``).
    """

    trainer_name = "DataFlexAsyncGRPOTrainer"

    def __init__(self, strategy: Any, **options: Any):
        super().__init__(strategy, **options)
        check_async_strategy(self.strategy)
        self.staleness: DomainStalenessStats | None = None
        # With record_decisions: the staleness of every sample taken and not dropped as stale, in order (it grows
        # with the run, so only tests and benchmarks keep it; the logged per-domain means come from `staleness`).
        self.consumed_staleness: list[int] = []
        self._versions: dict[int, int] = {}  # group id -> policy version it was generated with
        self._stale_groups: dict[int, list] = {}  # group id -> its samples TRL dropped as stale (for the filter)
        self._open_group: list = []  # samples of the group being read from the queue
        self._last_arrival: int | None = None  # the group id of the last sample taken from the queue
        self._dynamic = self.strategy.config.dynamic_sampling is not None
        # A step takes at most this many steps' worth of groups looking for signal (the dynamic_sampling part's
        # max_rounds; its default without one), then trains on zero-signal groups masked out.
        self.max_rounds = (self.strategy.config.dynamic_sampling or DynamicSamplingConfig()).max_rounds
        self.groups_spent = 0  # groups consumed without signal (dynamic sampling)
        self._taken_without_training = 0  # groups taken since a decision last passed a sample on
        self._warned_no_signal = False
        self._reward_names: list[str] = []  # the worker's reward functions, named in warnings
        self.zero_rewards = ZeroRewardWatch()  # warns once when the first steps' rewards are all 0 or None
        # The decisions of each step the dataloader assembled, oldest first, and of the one being assembled: a step
        # enters the summary when the optimizer takes it (the dataloader fetches one ahead).
        self._assembled: collections.deque[list] = collections.deque()
        self._assembling: list = []

    # ------------------------------------------------------------------ binding
    def bind(self, trainer) -> None:
        """Check the trainer against the strategy, install the queue view and (for mix / pre_select) the prompt feed."""
        if not is_async_trainer(trainer):
            raise WrongHostError(
                f"dataflex: {type(self).__name__} works with TRL's AsyncGRPOTrainer; got "
                f"{type(trainer).__name__}. attach(trainer, strategy) picks the callback for each TRL trainer."
            )
        self.refuse_other_trainer(trainer)
        if isinstance(trainer.rollout_queue, QueueArrivals):
            raise HostError(
                f"dataflex: this {type(trainer).__name__} already applies strategy "
                f"{trainer.rollout_queue.callback.strategy.name!r}; attach() is for a stock AsyncGRPOTrainer. Give "
                "the strategy once: DataFlexAsyncGRPOTrainer(..., strategy=...) or attach(AsyncGRPOTrainer(...), ...)."
            )
        self._check_worker(trainer)
        dataset = trainer.train_dataset
        columns = list(getattr(dataset, "column_names", None) or [])
        self.domain_key, domain_source = resolve_domain_key(self.strategy, self.domain_key)
        has_domains = self.domain_key in columns
        # Before check_host, as the synchronous adapter: its generic "needs domain labels" would not name
        # domain_key, the missing column or the columns the data has.
        check_sampling_dataset(dataset, self.strategy, self.domain_key, self.options.prompt_key_column, domain_source)
        self.strategy.check_host(async_fields(has_domains), host=f"TRL's AsyncGRPOTrainer (dataset columns {columns})")
        names = [getattr(f, "__name__", type(f).__name__) for f in getattr(trainer.rollout_worker, "reward_funcs", [])]
        self._reward_names = names
        self.zero_rewards = ZeroRewardWatch(reward_names=names or None)
        if names:  # the reward is read by name from each sample's metrics: the index is not needed, the check is
            resolve_reward_index(self.options.selection_reward, names)
        worker = trainer.rollout_worker
        self._labels = (
            [str(d) for d in domain_labels(dataset, self.domain_key, required=False)] if has_domains else None
        )
        domains = sorted(set(self._labels)) if self._labels is not None else [NO_DOMAIN]
        self.bind_mix_domains(domains)
        if self.strategy.allocates_rollouts:
            if not isinstance(worker, InProcessRolloutWorker):
                raise ConfigError(
                    f"dataflex: allocation screens prompts with a pilot before the rest of their group, but the "
                    f"trainer's {type(worker).__name__} asks its server for num_generations completions per prompt "
                    "at once; pass rollout_worker=InProcessRolloutWorker(...) (dataflex_callbacks.integrations.trl), "
                    "or drop the part"
                )
            self.strategy.bind_allocation_group_size(trainer.args.num_generations)
            worker.set_allocation(self.strategy)
        if acts_before_rollout(self.strategy):
            if not hasattr(worker, "set_prompt_feed"):
                raise ConfigError(
                    f"dataflex: {' and '.join(prompt_choosing_parts(self.strategy))} chooses prompts "
                    "before generation, but the trainer's "
                    f"{type(worker).__name__} reads the dataset itself (in order, in its own process); pass "
                    "rollout_worker=InProcessRolloutWorker(...) (dataflex_callbacks.integrations.trl), which takes its "
                    "prompts from the strategy's feed, or drop the part"
                )
            self.sampler = self._prompt_sampler(trainer, dataset)
            worker.set_prompt_feed(self._feed())
        self.staleness = DomainStalenessStats(domains)
        trainer.rollout_queue = QueueArrivals(trainer.rollout_queue, self)
        self.trainer = trainer
        if trainer.args.device.type == "cpu":  # TRL registered its FlashAttention-3 kernel, which needs a GPU
            use_cpu_tree_attention()

    @staticmethod
    def _check_worker(trainer) -> None:
        """Refuse a worker whose groups the trainer would wait for forever, or a setting that waits for a server."""
        worker, args = trainer.rollout_worker, trainer.args
        size = getattr(worker, "num_generations", args.num_generations)
        if size != args.num_generations:
            raise ConfigError(
                f"dataflex: the rollout worker makes groups of {type(worker).__name__}(num_generations={size}) "
                f"completions but the trainer reads groups of AsyncGRPOConfig(num_generations={args.num_generations}); "
                "pass the same num_generations to both"
            )
        if isinstance(worker, InProcessRolloutWorker) and args.token_budget is None:
            raise ConfigError(
                "dataflex: AsyncGRPOConfig(token_budget=None) makes the trainer wait for a vLLM server (up to "
                f"vllm_server_timeout={args.vllm_server_timeout} s) to read its max_model_len, but "
                "InProcessRolloutWorker generates in this process and there is no vLLM server; set "
                "AsyncGRPOConfig(token_budget=0) (a fixed count of samples per micro-batch) or a positive token budget"
            )

    def _prompt_sampler(self, trainer, dataset) -> DomainMixingSampler:
        labels = self._labels if self.strategy.mix_enabled else [NO_DOMAIN] * len(dataset)
        return DomainMixingSampler(
            dataset,
            labels=labels,
            prompt_key_column=self.options.prompt_key_column,
            prompt_labels=self._labels,
            batch_size=self.groups_per_step(trainer),
            num_generations=trainer.args.num_generations,
            layout="grpo",
            num_replicas=1,
            rank=0,
            strategy=self.strategy,
            seed=int(trainer.args.seed),
            resume="continue",
        )

    def _feed(self) -> Iterator[int]:
        """Dataset rows for the worker, one per prompt: the sampler's stream, each prompt's repeats taken together."""
        repeats = self.sampler.num_generations
        while True:
            stream = iter(self.sampler)
            for index in stream:
                for _ in range(repeats - 1):  # taken now, so a saved sampler never stands inside a prompt
                    next(stream)
                yield int(index)

    @staticmethod
    def groups_per_step(trainer) -> int:
        """B: the groups one optimizer step trains on (samples per step / ``num_generations``)."""
        args = trainer.args
        samples = (
            args.per_device_train_batch_size * args.gradient_accumulation_steps * trainer.accelerator.num_processes
        )
        if samples % args.num_generations:
            raise ConfigError(
                f"dataflex: a step of {samples} samples (per_device_train_batch_size x "
                f"gradient_accumulation_steps x processes) is not a whole number of groups of "
                f"num_generations={args.num_generations}; make it a multiple"
            )
        return samples // args.num_generations

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.attached:
            raise HostError(
                f"{type(self).__name__} was passed in callbacks=[...] but never attached: use "
                "attach(trainer, strategy) or DataFlexAsyncGRPOTrainer(..., strategy=...)"
            )
        self.summary.reset()
        self._assembled.clear()
        self._assembling = []
        if state.is_world_process_zero:
            domains = sorted(set(self._labels)) if self._labels is not None else None
            line = self.strategy.summary_line(domains, self.domain_key)
            if not self.strategy.is_noop and self._reward_names:
                weights = getattr(self.trainer.rollout_worker, "reward_weights", None)
                weights = [1.0] * len(self._reward_names) if weights is None else weights
                line += "; selects on " + selection_reward_text(
                    self.options.selection_reward, self._reward_names, weights
                )
            print(line, flush=True)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self._assembled:
            for batch, decision in self._assembled.popleft():
                self.summary.update(batch, decision)
            self.summary.end_step()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            print(self.summary.line(self.strategy.name, warning="NoSignalStepWarning"), flush=True)
        return control

    # ------------------------------------------------------------------ what arrives
    def row_of(self, group_id: int) -> int:
        """The dataset row group ``group_id`` was generated from (the feed's record, else TRL's worker's order)."""
        worker = self.trainer.rollout_worker
        if hasattr(worker, "row_of"):
            return worker.row_of(group_id)
        start = worker._loop_kwargs.get("dataset_start_index", 0) if hasattr(worker, "_loop_kwargs") else 0
        return (start + group_id) % len(self.trainer.train_dataset)

    def domain_of(self, group_id: int) -> str:
        return NO_DOMAIN if self._labels is None else self._labels[self.row_of(group_id)]

    def arrived(self, sample) -> None:
        """A sample was taken from the queue: record its version;
        one TRL drops as stale is counted (and kept for the filter)."""
        trainer = self.trainer
        # The trainer's first: TRL passes its version on to the worker, which tags samples with it.
        check_policy_version(trainer.model_version, f"{type(trainer).__name__}.model_version is", "trainer")
        check_policy_version(sample.model_version, f"a sample of group {sample.group_id} has model_version", "worker")
        staleness = trainer.model_version - sample.model_version
        self._versions[sample.group_id] = sample.model_version
        self._last_arrival = sample.group_id
        if staleness > trainer.args.max_staleness:  # RolloutQueueDataset's own rule, applied right after this get
            self.staleness.update([self.domain_of(sample.group_id)], torch.tensor([staleness]), torch.tensor([True]))
            if self.strategy.skips_prompts:
                self._stale_groups.setdefault(sample.group_id, []).append(sample)
        elif self.options.record_decisions:
            self.consumed_staleness.append(staleness)

    # ------------------------------------------------------------------ deciding
    def train_dataloader(self, trainer, original: Callable):
        """Wraps ``get_train_dataloader``: put `ConsumedSamples` between TRL's queue dataset and its batcher."""
        loader = original()
        if trainer.accelerator.is_main_process:
            batcher = loader.dataset
            source = getattr(batcher, "dataset", None)
            if type(source).__name__ != "RolloutQueueDataset":
                raise HostError(
                    f"dataflex: this TRL's AsyncGRPOTrainer dataloader is not RolloutQueueDataset -> batcher "
                    f"(found {type(batcher).__name__} over {type(source).__name__}); the adapter supports "
                    "TRL 1.16's layout"
                )
            batcher.dataset = ConsumedSamples(source, self)
        return loader

    def _next_group(self, samples: Iterator[dict]) -> list[dict]:
        """The next group from TRL's queue dataset: ``num_generations`` samples, or fewer when the next group's
        first sample comes first (a worker queues a group's samples together; one that lost some of a group's
        rollouts, as TRL's will after cancelled or failed ones, queues a short group)."""
        size = self.trainer.args.num_generations
        while True:
            sample = next(samples)
            if self._open_group and self._open_group[0]["group_id"] != sample["group_id"]:
                group, self._open_group = self._open_group, [sample]
                return group
            self._open_group.append(sample)
            if len(self._open_group) == size:
                group, self._open_group = self._open_group, []
                return group

    def _batch(self, groups: list[list[dict]]) -> RolloutBatch:
        rows = [s for group in groups for s in group]
        selection_reward = self.options.selection_reward
        key = "reward" if selection_reward is None else f"rewards/{selection_reward}"
        lengths = [int(s["completion_mask"].sum()) for s in rows]
        width = max(lengths, default=0)
        mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        group_rows = [self.row_of(s["group_id"]) for s in rows]
        dataset = self.trainer.train_dataset
        return RolloutBatch(
            torch.tensor([float(s["metrics"][key]) for s in rows]),
            group_ids=torch.tensor([s["group_id"] for s in rows]),
            completion_mask=mask,
            advantages=torch.tensor([float(s["advantage"]) for s in rows]),
            domains=None if self._labels is None else [self._labels[r] for r in group_rows],
            prompt_keys=[row_key(dataset[r], self.options.prompt_key_column) for r in group_rows],
            policy_versions=torch.tensor([self._versions[s["group_id"]] for s in rows]),
            trainer_version=int(self.trainer.model_version),
        )

    def _observe_stale(self, step: int) -> None:
        """Show the pre-rollout filter the outcomes TRL dropped as stale: late, but real outcomes of their prompts."""
        size = self.trainer.args.num_generations
        # A group is whole at num_generations samples, or (short) once a sample of another group arrived after it.
        done = [g for g, s in self._stale_groups.items() if len(s) == size or g != self._last_arrival]
        if not done:
            return
        groups = [
            [
                {
                    "group_id": s.group_id,
                    "metrics": s.metrics,
                    "advantage": s.advantage,
                    "completion_mask": s.completion_mask,
                }
                for s in self._stale_groups.pop(g)
            ]
            for g in done
        ]
        self.strategy.observe_prompt_groups(self._batch(groups), step)

    def _take_groups(self, samples: Iterator[dict], step: int, wanted: int) -> tuple[list, list, dict[str, float]]:
        """``(groups to decide on, zero-signal groups taken (spent), dynamic metrics)``.

        With dynamic sampling, as the synchronous loop's max_rounds: groups are taken until ``wanted`` carry
        signal or ``max_rounds`` steps' worth were taken; the rest are counted as spent.
        """
        if not self._dynamic:
            return [self._next_group(samples) for _ in range(wanted)], [], {}
        groups, zero_signal, limit = [], [], wanted * self.max_rounds
        while len(groups) < wanted and len(zero_signal) + len(groups) < limit:
            taken = [self._next_group(samples) for _ in range(wanted - len(groups))]
            signal = signal_rows(self._batch(taken), self.strategy, step=step)
            first = 0
            for group in taken:
                if bool(signal[first]):
                    groups.append(group)
                else:
                    zero_signal.append(group)
                first += len(group)
        spent = len(zero_signal)
        self.groups_spent += spent
        # Sums over TRL's logging window ("total" in a name): with logging_steps=1, the groups one step took, plus
        # those of a step the dataloader fetched ahead.
        metrics = {
            "dynamic/zero_signal_groups_window_total": float(spent),
            "dynamic/groups_taken_window_total": float(spent + len(groups)),
        }
        return groups, zero_signal, metrics

    def next_decision(self, samples: Iterator[dict]) -> list[dict]:
        """Take one step's groups from the queue, decide, and return the kept samples (advantages weighted).

        A decision that keeps nothing returns no sample, so the batcher takes more groups; once a step's worth of
        pulls (``max_rounds`` x B groups) passed nothing on, the last groups go on masked out (advantage 0: TRL's
        loss on them is 0), so the step ends, with a `NoSignalStepWarning`.
        """
        trainer = self.trainer
        step = int(trainer.state.global_step)
        wanted = self.groups_per_step(trainer)
        groups, spent, extra = self._take_groups(samples, step, wanted)
        self._taken_without_training += int(extra.get("dynamic/groups_taken_window_total", len(groups)))
        # A step without a signal group trains on B zero-signal ones masked out; the others are not decided on.
        groups, unused = (groups, spent) if groups else (spent[:wanted], spent[wanted:])
        if self.strategy.skips_prompts:
            self._observe_stale(step)
        rows = [s for group in groups for s in group]
        batch = self._batch(groups)
        for taken in (batch, *([self._batch(unused)] if unused else [])):  # every group the step took from the queue
            self.zero_rewards.observe(taken.rewards, step + 1)
        # No DroppedAllWarning here: a decision that keeps nothing is refilled from the queue, so the step does
        # train; the one that cannot be refilled is masked out and says so with a NoSignalStepWarning.
        decision = decide(self.strategy, batch, step, seed=int(trainer.args.seed), warn=False, host_step=step + 1)
        keep, weights = decision.keep, decision.weights.to(torch.float32)
        masked = not bool(keep.any()) and self._taken_without_training >= wanted * self.max_rounds
        if masked:
            self._warn_no_signal(batch, step + 1, self._taken_without_training, len(groups))
        # A decision that keeps nothing is refilled within the same step: the step closes with the one that trains.
        self._assembling.append((batch, decision))
        if unused:  # the end-of-run line counts every group taken from the queue, whatever the strategy
            self._assembling.append(self._unused_groups(unused))
        if masked or bool(keep.any()):
            self._taken_without_training = 0
            self._assembled.append(self._assembling)
            self._assembling = []
        extra = {
            **extra,
            "no_signal_steps_window_total": float(masked),
            "short_groups_window_total": float(sum(len(g) < trainer.args.num_generations for g in groups)),
        }
        self.staleness.update(batch.row_domains(), batch.staleness, torch.zeros(batch.n, dtype=torch.bool), ~keep)
        self.staleness.check_bias()
        metrics = trainer._metrics["train"]
        for name, value in {**decision.metrics, **extra, **self.staleness.compute()}.items():
            metrics[f"dataflex/{name}"].append(float(value))
        if self.options.record_decisions:
            self.decisions.append(
                {
                    "step": step,
                    "keep": keep.clone(),
                    "weights": weights.clone(),
                    "group_ids": batch.group_ids.clone(),
                    "staleness": batch.staleness.clone(),
                    "prompt_keys": list(batch.prompt_keys),
                    "metrics": dict(decision.metrics),
                    "zero_signal_groups": extra.get("dynamic/zero_signal_groups_window_total", 0.0),
                    "short_groups": extra["short_groups_window_total"],
                    "masked": masked,
                }
            )
        if masked:
            return [{**sample, "advantage": 0.0} for sample in rows]
        weighted = decision.weighted()
        kept = []
        for row, sample in enumerate(rows):
            if bool(keep[row]):
                if weighted:
                    sample = {**sample, "advantage": float(sample["advantage"]) * float(weights[row])}
                kept.append(sample)
        return kept

    def _unused_groups(self, groups: list[list[dict]]) -> tuple[RolloutBatch, Decision]:
        """The zero-signal groups dynamic sampling took and did not train, as a decision that keeps none of them."""
        batch = self._batch(groups)
        return batch, Decision(keep=torch.zeros(batch.n, dtype=torch.bool), weights=torch.zeros(batch.n))

    def _warn_no_signal(self, batch: RolloutBatch, step: int, taken: int, groups: int) -> None:
        """Warn once that a step found no group to keep in its bound of pulls: the cause, and the fix."""
        if self._warned_no_signal:
            return
        self._warned_no_signal = True
        rewards = batch.rewards.float()
        finite = torch.isfinite(rewards)
        if not bool(finite.any()):
            cause, what = "nonfinite_rewards", "no completion got a finite reward (each was None or NaN)"
            fix = (
                f"the reward functions {self._reward_names} returned None (or NaN) for every completion: return a "
                "float for each completion you can score (None only for one you cannot)"
            )
        elif every_group_equal(rewards, batch.group_ids):
            cause = "equal_rewards"
            what = f"within every group the completions got one reward (rewards {sorted(set(rewards.tolist()))})"
            fix = (
                "give partial credit in the reward, use prompts the model solves now and then, or raise "
                "num_generations; or train without the strategy (strategy='baseline') until some groups differ"
            )
        else:
            cause, what = (
                "selector",
                f"its select part dropped every group (rewards {rewards.min():.4g} to {rewards.max():.4g})",
            )
            fix = (
                "widen the select part's band, or name the reward it should read with "
                "attach(trainer, strategy, selection_reward=...)"
            )
        warnings.warn(
            NoSignalStepWarning(
                f"dataflex: step {step}: TRL's AsyncGRPOTrainer took {taken} groups from the rollout queue "
                f"({self.max_rounds} steps' worth, the bound) and strategy {self.strategy.name!r} kept none: {what}. "
                f"The step trains on {groups} of them masked out (advantage 0), so the weights do not move; if "
                f"every step does this, nothing trains (metric dataflex/no_signal_steps_window_total). Fix: {fix}. "
                "This warning is shown once.",
                step=step,
                cause=cause,
                fix=fix,
            ),
            stacklevel=user_stacklevel(),
        )

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_parts(self) -> dict[str, Any]:
        """The counters and the prompt feed (sampler and next group id), beside the strategy's state."""
        parts: dict[str, Any] = {"groups_spent": self.groups_spent}
        if self.sampler is not None:
            parts["sampler"] = self.sampler.state_dict()
            parts["next_group_id"] = int(self.trainer.rollout_worker.next_group_id)
            parts["group_rows"] = dict(self.trainer.rollout_worker.group_rows)
        return parts

    def restore_parts(self, saved: Mapping[str, Any], folder: str) -> None:
        self.groups_spent = int(saved.get("groups_spent", 0))
        if self.sampler is not None:
            if saved.get("sampler") is None:
                warnings.warn(
                    f"dataflex: checkpoint {folder} has no prompt feed state; prompts restart from a fresh stream",
                    stacklevel=user_stacklevel(),
                )
            else:
                self.sampler.load_state_dict(saved["sampler"])
                worker = self.trainer.rollout_worker
                worker.group_rows.update(saved.get("group_rows", {}))
                worker.set_prompt_feed(self._feed(), next_group_id=int(saved["next_group_id"]))


class DataFlexAsyncGRPOTrainer(async_trainer_class()):
    """TRL's ``AsyncGRPOTrainer`` with a data strategy; every ``AsyncGRPOTrainer`` argument works unchanged.

    On a CPU it also builds and trains without a GPU's parts: it builds inside `async_rollout.cpu_device_name`
    and `bind` registers `async_rollout.use_cpu_tree_attention` (``attach`` does the latter only).

    Equivalent to a stock ``AsyncGRPOTrainer`` plus ``attach(trainer, strategy)``; the callback is
    ``trainer.dataflex`` (`DataFlexAsyncCallback`, whose arguments ``strategy`` and the
    `options.AdapterOptions` are taken here).
    """

    def __init__(self, *args, strategy: Any = None, **kwargs):
        if strategy is None:
            raise ConfigError(
                "dataflex: DataFlexAsyncGRPOTrainer needs strategy=... (preset name, config dict, YAML path "
                "or Strategy), e.g. DataFlexAsyncGRPOTrainer(..., strategy='diffband')."
            )
        self.dataflex = DataFlexAsyncCallback(strategy, **AdapterOptions.take(kwargs))
        host = async_trainer_class()
        parameters = inspect.signature(host.__init__).parameters
        AdapterOptions.check_names(
            kwargs, f"{type(self).__name__}(...)", parameters, f"{host.__name__}'s own arguments"
        )
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), self.dataflex]
        with cpu_device_name():  # TRL asks the CUDA device's name for its MFU metric, which fails on a CPU-only torch
            super().__init__(*args, **kwargs)
        self.dataflex.bind(self)

    def get_train_dataloader(self):
        return self.dataflex.train_dataloader(self, super().get_train_dataloader)

    def _load_optimizer_and_scheduler(self, checkpoint):
        return self.dataflex.load_optimizer_and_scheduler(self, super()._load_optimizer_and_scheduler, checkpoint)
