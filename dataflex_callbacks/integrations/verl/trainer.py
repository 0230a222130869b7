"""verl's v1 trainers with a DataFlex strategy in the loop: one implementation of the strategy steps
(`DataFlexSteps`) on each of verl's trainer modes.

- `DataFlexPPOTrainer`: ``trainer.v1.trainer_mode=dataflex_sync`` (alias ``dataflex_mix_sync``, the
  name DataFlex-RL configs use), on verl's ``sync`` trainer;
- `DataFlexColocateAsyncTrainer`: ``dataflex_colocate_async``, on verl's ``colocate_async``
  (partial rollouts, trainer and rollout on the same devices);
- `DataFlexSeparateAsyncTrainer`: ``dataflex_separate_async``, on verl's ``separate_async`` (a
  standalone rollout pool; needs a non-naive checkpoint engine, i.e. GPUs).

In the asynchronous modes every response carries the policy version it was generated with (verl's
``max_global_steps`` tag): the strategy sees it as `RolloutBatch.policy_versions`, with
``trainer_version = global_steps - 1``, so staleness is verl's own ``trajectory_staleness``, and
the trainer logs it per domain (``dataflex/staleness/*``). Per training step:

1. prompts come from verl's ``StatefulDataLoader``; with a ``mix`` part its sampler is the core's
   `DomainMixingSampler` (its state is saved in verl's ``data.pt``); with ``pre_select``,
   `_fetch_one_gen_batch` skips prompts before they are generated; with ``allocation`` (``dataflex_sync`` only),
   ``prepare_step`` runs the step's pilot and commit rounds and merges each commit into its pilot's group
   (`allocation.VerlAllocation`) before verl's ReplayBuffer samples;
2. after verl's ``_compute_advantage``, the strategy sees the batch's fields (``uid`` groups,
   scores, advantages, ``response_mask``, ``old_log_probs``, ``entropy``, the domain column,
   ``index``) and its decision is written back to TransferQueue as ``rollout_is_weights``
   (multiplied into any weights verl computed) plus zeroed ``response_mask``/``loss_mask`` for
   dropped responses, see `fields.loss_fields_from_decision`;
3. the strategy's state (mixing statistics, prompt history) is saved next to verl's checkpoint as
   ``dataflex.pt``.

Everything else (rollout, rewards, log-probs, actor and critic updates) is verl's unchanged.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import response_to_nested

from dataflex_callbacks import DomainMixingSampler, RolloutBatch
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import (
    BatchFeed,
    Candidates,
    checkpoint_state,
    decide,
    read_state_file,
    resolve_domain_key,
    restore_strategy,
)
from dataflex_callbacks.metrics import DomainStalenessStats, RunSummary
from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.sampling.sampler import domain_labels

from .allocation import TransferQueueRollouts, VerlAllocation, domains_from
from .config import check_verl_config, drop_reference_sampler
from .fields import DEFAULT_DOMAIN_KEY, loss_fields_from_decision, rollout_batch_from_fields

logger = logging.getLogger("dataflex_callbacks.integrations.verl")

STATE_FILE = "dataflex.pt"
# Fields verl's v1 trainer keeps in TransferQueue that the strategy may read; absent ones are skipped.
STRATEGY_FIELDS = (
    "uid",
    "response_mask",
    "rm_scores",
    "token_level_rewards",
    "advantages",
    "old_log_probs",
    "entropy",
    "rollout_is_weights",
    "index",
)


class DataFlexSteps:
    """The strategy steps of every DataFlex verl trainer; mixed in before one of verl's v1 trainers.

    `BASE_MODE` names the verl trainer mode underneath: verl branches on ``self.trainer_mode``
    (replay buffer, dataloader chunking, TransferQueue checkpointing), so the trainer reports that
    mode, and the name it was registered under is kept in ``registered_name``.
    """

    BASE_MODE = "sync"

    @property
    def trainer_mode(self) -> str:
        return self.BASE_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.registered_name = value

    def __init__(self, config):
        # Before verl builds its replay buffer from that config.
        self._reference_sampler = drop_reference_sampler(config)
        self.strategy, self.dataflex_options = check_verl_config(config)
        self._domain_key_name: str | None = None  # fixed by _init_dataloader when mixing
        if self.strategy is not None:
            logger.info("dataflex: %r", self.strategy)
        else:
            logger.warning(
                "dataflex: trainer_mode=%s but the config has no enabled 'dataflex:' block; "
                "training exactly as trainer_mode=%s",
                config.trainer.v1.trainer_mode,
                self.BASE_MODE,
            )
        self.prompt_sampler: DomainMixingSampler | None = None
        self._prompt_carry: TensorDict | None = None
        self._prompt_rng = np.random.default_rng(self._sampler_seed(config))
        self.dataflex_metrics: dict[str, float] = {}
        self.staleness_stats: DomainStalenessStats | None = None  # built at the first batch that has versions
        self.dataflex_summary = RunSummary()  # what the strategy kept, printed when fit() returns
        self.allocation_metrics: dict[str, float] = {}
        super().__init__(config)
        self.rollout_allocation = self._rollout_allocation(config)

    def _rollout_allocation(self, config) -> VerlAllocation | None:
        """The pilot-and-commit rounds of an ``allocation`` part (`allocation.VerlAllocation`); None without one."""
        if self.strategy is None or not self.strategy.allocates_rollouts:
            return None
        return VerlAllocation(
            self.strategy,
            group_size=config.actor_rollout_ref.rollout.n,
            batch_groups=config.data.train_batch_size,
            fetch=self._fetch_one_gen_batch,
            domains_of=lambda batch: domains_from(batch, self._domain_key()),
        )

    def _sampler_seed(self, config) -> int:
        seed = self.dataflex_options.get("seed")
        if seed is None:
            seed = config.data.get("seed", None)
        return 0 if seed is None else int(seed)

    # ------------------------------------------------------------ prompt feed

    def _domain_key(self) -> str:
        """The dataset column holding the domain: ``dataflex.domain_key`` if set, else verl's ``data_source``."""
        if self._domain_key_name is not None:
            return self._domain_key_name
        return resolve_domain_key(self.strategy, default=DEFAULT_DOMAIN_KEY)[0]

    def _choose_domain_key(self, columns, values_of) -> str:
        """`_domain_key`, except that an unset key reads ``domain`` when only it holds the mix's domains.

        DataFlex-RL's mix data keeps ``data_source`` for reward routing and puts the domain in a
        ``domain`` column, its default ``domain_key``; a reference block that lists its domains
        but names no key then still finds them.
        """
        if getattr(self.strategy, "domain_key", None) is not None:
            return self._domain_key()
        declared = getattr(self.strategy, "domains", None)
        if not declared or "domain" not in columns:
            return DEFAULT_DOMAIN_KEY
        wanted = {str(d) for d in declared}
        if DEFAULT_DOMAIN_KEY in columns and wanted <= set(map(str, values_of(DEFAULT_DOMAIN_KEY))):
            return DEFAULT_DOMAIN_KEY
        if wanted <= set(map(str, values_of("domain"))):
            logger.warning(
                "dataflex mix: the domains %s are values of the 'domain' column, not of %r; reading "
                "domains from 'domain' (DataFlex-RL's default). Set dataflex.domain_key to silence this",
                sorted(wanted),
                DEFAULT_DOMAIN_KEY,
            )
            return "domain"
        return DEFAULT_DOMAIN_KEY

    def _init_dataloader(self):
        super()._init_dataloader()
        if self.strategy is None or not self.strategy.mix_enabled:
            return
        dataset = self.train_dataset
        frame = getattr(dataset, "dataframe", None)
        if frame is not None:
            column = self._choose_domain_key(frame.column_names, lambda name: frame[name])
            if column not in frame.column_names:
                raise ConfigError(
                    f"dataflex mix: the training data has no domain column {column!r}; its columns are "
                    f"{frame.column_names}. Set dataflex.domain_key to the column holding the domain"
                )
            labels = domain_labels(frame, column)
        else:
            column = self._domain_key()
            labels = domain_labels(dataset, column)
        self._domain_key_name = column
        loader = self.train_dataloader
        self.prompt_sampler = DomainMixingSampler(
            labels=labels,
            batch_size=loader.batch_size,
            num_samples=len(dataset),
            layout="grpo",
            strategy=self.strategy,
            seed=self._sampler_seed(self.config),
            resume="continue",
            quota=self._quota(),
        )
        # verl's loader with only the sampler swapped; StatefulDataLoader saves the sampler's
        # state_dict in its own state, i.e. in verl's data.pt checkpoint.
        self.train_dataloader = StatefulDataLoader(
            dataset=dataset,
            batch_size=loader.batch_size,
            num_workers=loader.num_workers,
            drop_last=True,
            collate_fn=loader.collate_fn,
            sampler=self.prompt_sampler,
        )
        self.train_dataloader_it = None
        if loader.num_workers > 0:
            logger.warning(
                "dataflex mix: data.dataloader_num_workers=%d prefetches prompt batches, so a change of "
                "the mixing proportions reaches generation a few batches late; set it to 0 for exact "
                "per-step proportions",
                loader.num_workers,
            )

    # ------------------------------------------------------------ training

    def fit(self, *args, **kwargs):
        """verl's training loop, between one console line naming the strategy, its parts and the domains seen,
        and one summing up what it kept (`RunSummary`)."""
        if self.strategy is None:
            return super().fit(*args, **kwargs)
        print(self.strategy.summary_line(self._domains_seen(), self._domain_key()), flush=True)
        self.dataflex_summary.reset()
        result = super().fit(*args, **kwargs)
        if not self.strategy.is_noop:
            print(self.dataflex_summary.line(self.strategy.name), flush=True)
        return result

    def _domains_seen(self) -> list[str] | None:
        """The domains of the training data: the sampler's, else the domain column's values (None: no such column)."""
        if self.prompt_sampler is not None:
            return list(self.prompt_sampler.domains)
        frame = getattr(getattr(self, "train_dataset", None), "dataframe", None)
        column = self._domain_key()
        if frame is None or column not in frame.column_names:
            return None
        return sorted({str(value) for value in frame[column]})

    def _quota(self) -> str | None:
        """``dataflex.quota``; unset, exact quotas where the config asked for DataFlex-RL's replay buffer,
        else the strategy's ``mix.quota`` (None lets the sampler read it)."""
        quota = self.dataflex_options.get("quota")
        if quota is None and self._reference_sampler:
            quota = "exact"
        return quota

    def _fetch_one_gen_batch(self) -> TensorDict:
        if self.strategy is None or not self.strategy.skips_prompts:
            return super()._fetch_one_gen_batch()
        size = self.config.data.get("gen_batch_size", None) or self.config.data.train_batch_size
        # Rows after the last accepted one wait in the feed's carry for the next step's fetch.
        feed = BatchFeed(super()._fetch_one_gen_batch, self._candidates, tu.index_select_tensor_dict)
        feed.carry, self._prompt_carry = self._prompt_carry, None
        allocation = getattr(self, "rollout_allocation", None)  # a skipped prompt saves its pilot, or its group
        self.strategy.set_completions_per_prompt(
            self.config.actor_rollout_ref.rollout.n if allocation is None else allocation.pilot
        )
        self.strategy.accept_from(feed, size, self._prompt_rng)
        self._prompt_carry = feed.carry
        return feed.accepted[0] if len(feed.accepted) == 1 else tu.concat_tensordict(feed.accepted)

    def _candidates(self, batch: TensorDict) -> Candidates:
        """A fetched prompt batch as `Strategy.accept_from` candidates: verl's ``index`` keys, domains for the prior."""
        if "index" not in batch.keys():
            raise ConfigError(
                "dataflex pre_select needs a stable per-prompt key: give every training row "
                "extra_info.index (verl's example preprocessing scripts do)"
            )
        keys = list(tu.get(batch, "index"))
        return Candidates(keys=keys, labels=self._candidate_domains(batch, len(keys)))

    def _candidate_domains(self, candidates: TensorDict, count: int) -> list[str] | None:
        """The candidates' domains as their rollouts will be recorded (`NO_DOMAIN` without the domain column),
        for the filter's prior; None with a mix part, whose sampler has chosen the domain already (as in TRL)."""
        if self.strategy.mix_enabled:
            return None
        values = tu.get(candidates, self._domain_key())
        return [NO_DOMAIN] * count if values is None else [str(value) for value in values]

    # ------------------------------------------------------------ rollout allocation

    def prepare_step(self) -> dict:
        """verl's submission of one batch of prompts; with an ``allocation`` part, the step's screening rounds instead
        (`VerlAllocation.step`: pilots, commits, merged groups of G, all done before verl's ReplayBuffer samples)."""
        if getattr(self, "rollout_allocation", None) is None:
            return super().prepare_step()
        rollouts = TransferQueueRollouts(self._submit_batch_to_rollout, int(self.global_steps))
        counts = self.rollout_allocation.step(rollouts, int(self.global_steps))
        self.allocation_metrics = {f"dataflex/{name}": float(value) for name, value in counts.items()}
        return {}

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        metrics.update(self.allocation_metrics)  # the step's dataflex/alloc/*, logged once with verl's metrics
        self.allocation_metrics = {}
        return super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)

    # ------------------------------------------------------------ strategy after advantages

    def _compute_advantage(self, batch, metrics: dict):
        batch = super()._compute_advantage(batch, metrics)
        if self.strategy is None or self.strategy.is_noop:
            return batch
        return self.apply_strategy(batch, metrics)

    def apply_strategy(self, batch, metrics: dict):
        """Run the strategy on a TransferQueue batch and write the loss fields back; returns the batch meta."""
        domain_key = self._domain_key()
        fields = list(STRATEGY_FIELDS) + [domain_key]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        real = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
        tensors, non_tensors = _split_padded(data.to_padded_tensor())
        if "rm_scores" in tensors:
            tensors["token_level_scores"] = tensors.pop("rm_scores")
        real_rows = torch.from_numpy(np.flatnonzero(real))
        versions = policy_versions(batch.tags, real) if self.BASE_MODE != "sync" else None
        rollout = rollout_batch_from_fields(
            {k: v[real_rows] for k, v in tensors.items()},
            {k: np.asarray(v, dtype=object)[real] for k, v in non_tensors.items()},
            domain_key=domain_key,
            policy_versions=versions,
            trainer_version=None if versions is None else int(self.global_steps) - 1,
        )
        # One process (verl's driver) decides, so it is the one that warns.
        decision = decide(self.strategy, rollout, int(self.global_steps), warn=True)
        self.dataflex_summary.update(rollout, decision)
        self.dataflex_summary.end_step()

        response_mask = tensors["response_mask"]
        existing = tensors.get("rollout_is_weights")
        real_fields = loss_fields_from_decision(
            decision,
            response_mask[real_rows],
            self.config.actor_rollout_ref.actor.loss_agg_mode,
            existing_weights=None if existing is None else existing[real_rows],
        )
        out = {
            "rollout_is_weights": torch.zeros(response_mask.shape, dtype=torch.float32),
            "response_mask": response_mask.clone(),
            "loss_mask": response_mask.clone(),
        }
        for name, value in real_fields.items():
            out[name][real_rows] = value.to(out[name].dtype)
        output = TensorDict(
            {name: response_to_nested(value, nested_mask) for name, value in out.items()}, batch_size=len(batch)
        )
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

        step_metrics = {f"dataflex/{k}": float(v) for k, v in decision.metrics.items()}
        if versions is not None:
            step_metrics.update(self._staleness_metrics(rollout, decision))
        if self.prompt_sampler is not None:  # the share of drawn prompts, also before the mixer's first update
            actual = self.prompt_sampler.actual_proportions(recent=True)
            step_metrics.update({f"dataflex/mix/actual/{d}": p for d, p in actual.items()})
        self.dataflex_metrics = step_metrics
        metrics.update(step_metrics)
        return batch

    def _staleness_metrics(self, rollout: RolloutBatch, decision) -> dict[str, float]:
        """Per-domain staleness of the consumed responses and the share the strategy dropped, over the run so far.

        Stale responses verl evicts never reach the trainer (`ReplayBufferAsync` drops them inside
        ``_evict_terminal_groups``); verl logs their count as ``off_policy/evicted_samples``, so the
        stale-drop share per domain is not known here and is not logged.
        """
        domains = rollout.domains or [NO_DOMAIN] * rollout.n
        if self.staleness_stats is None:  # every domain of the data (a batch holds only some of them)
            self.staleness_stats = DomainStalenessStats(
                sorted(set(self._domains_seen() or []) | set(domains)), sees_stale_drops=False
            )
        self.staleness_stats.update(domains, rollout.staleness, dropped_strategy=~decision.keep.bool())
        values = {f"dataflex/{name}": value for name, value in self.staleness_stats.compute().items()}
        values["dataflex/staleness/mean"] = float(rollout.staleness.float().mean()) if rollout.n else 0.0
        return values

    # ------------------------------------------------------------ checkpoint

    def _step_folder(self) -> str | None:
        if self.config.trainer.resume_mode == "resume_path":
            folder = self.config.trainer.resume_from_path
        else:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)

    def _save_checkpoint(self):
        super()._save_checkpoint()
        if self.strategy is not None:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            os.makedirs(folder, exist_ok=True)
            torch.save(
                checkpoint_state(self.strategy, rng=self._prompt_rng.bit_generator.state),
                os.path.join(folder, STATE_FILE),
            )

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.strategy is None or self.global_steps == 0:
            return
        self.load_dataflex_state(self._step_folder())

    def load_dataflex_state(self, folder: str) -> None:
        """Restore the strategy and the prompt-acceptance generator from a checkpoint folder (`checkpoint_state`)."""
        # Plain containers, tensors and numbers only: safe loading, as for any checkpoint a user may share.
        state = read_state_file(folder, STATE_FILE, saved_by=f"trainer_mode={self.registered_name}")
        if state is None:
            return
        restore_strategy(self.strategy, state, source=folder, writer=f"trainer_mode={self.registered_name}")
        self._prompt_rng.bit_generator.state = state["rng"]


class DataFlexPPOTrainer(DataFlexSteps, PPOTrainerSync):
    """verl's sync v1 PPO/GRPO trainer that applies the ``dataflex:`` strategy of the config (``dataflex_sync``)."""

    BASE_MODE = "sync"


class DataFlexColocateAsyncTrainer(DataFlexSteps, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer (partial rollouts, generation one step ahead on the same devices) with the
    ``dataflex:`` strategy (``dataflex_colocate_async``); responses carry their policy version."""

    BASE_MODE = "colocate_async"


class DataFlexSeparateAsyncTrainer(DataFlexSteps, PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer (a standalone rollout pool) with the ``dataflex:`` strategy
    (``dataflex_separate_async``). verl requires a non-naive checkpoint engine (NCCL-class weight transfer):
    untested end to end here, see docs/verl.md."""

    BASE_MODE = "separate_async"


TRAINERS = {
    "dataflex_sync": DataFlexPPOTrainer,
    "dataflex_mix_sync": DataFlexPPOTrainer,
    "dataflex_colocate_async": DataFlexColocateAsyncTrainer,
    "dataflex_separate_async": DataFlexSeparateAsyncTrainer,
}
"""The trainer modes this plugin registers beside verl's own, and their classes."""


def policy_versions(tags: list[dict], real: np.ndarray) -> torch.Tensor | None:
    """``(N,)`` policy versions of the real rows: verl's ``max_global_steps`` tag (the newest weights a response was
    generated with, so ``global_steps - 1 - version`` is verl's ``trajectory_staleness``); None when a row lacks it."""
    versions = [tag.get("max_global_steps") for tag, is_real in zip(tags, real, strict=True) if is_real]
    if any(v is None for v in versions):
        return None
    return torch.tensor([int(v) for v in versions], dtype=torch.int64)


def _split_padded(data: TensorDict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensor fields and per-row non-tensor fields (lists) of a padded TensorDict."""
    tensors, non_tensors = {}, {}
    for key in data.keys():
        value = data.get(key)
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        else:
            non_tensors[key] = list(value.tolist()) if hasattr(value, "tolist") else list(value)
    return tensors, non_tensors
