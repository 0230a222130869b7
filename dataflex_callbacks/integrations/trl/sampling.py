"""The `DomainMixingSampler` that replaces TRL's ``RepeatSampler`` when a strategy acts before rollout.

TRL's GRPOTrainer and RLOOTrainer draw prompts through ``_get_train_sampler``. A strategy with
a ``mix`` part (which domain next) or a ``pre_select`` part (which prompts to skip) must choose
there, before anything is generated. `grpo_mixing_sampler` builds a sampler with ``RepeatSampler``'s layout:

- ``batch_size = generation_batch_size // num_generations`` prompts per chunk (one generation
  round of all processes together);
- each prompt ``num_generations`` times in a row;
- each chunk ``num_iterations * steps_per_generation`` times (TRL reuses a generation round);
- the same stream on every rank (seeded by ``args.seed``), since TRL shards batches itself;
- ``resume="replay"``: HF Trainer re-iterates the sampler on resume and skips consumed batches.

Without a mix part the sampler draws from all rows as one pool (as ``RepeatSampler`` does), so
prompts a pre-rollout filter skips are replaced by prompts of any domain; the domain column, when
there is one, only tells the filter which domain an unseen prompt belongs to; without one every
prompt is in `NO_DOMAIN`, the domain a batch without domains is recorded under.

Prompt keys: the sampler and the adapter's `RolloutBatch` name a prompt by the same key,
`row_key` (the ``prompt_key_column`` when given, else `dataflex_callbacks.rollout.prompt_keys.row_prompt_key`),
so the history a pre-rollout filter keeps from rollouts is the one the sampler reads.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from dataflex_callbacks import DomainMixingSampler, Strategy
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import DEFAULT_DOMAIN_KEY, acts_before_rollout
from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.rollout.prompt_keys import hashable_key, row_prompt_key
from dataflex_callbacks.sampling.sampler import domain_labels

DEFAULT_DOMAIN_SOURCE = f"the default domain column {DEFAULT_DOMAIN_KEY!r}"
"""What `dataflex_callbacks.host.resolve_domain_key` says when no setting names the domain column."""

__all__ = [
    "DEFAULT_DOMAIN_SOURCE",
    "acts_before_rollout",
    "check_sampling_dataset",
    "grpo_mixing_sampler",
    "row_key",
]


def row_key(row: Mapping[str, Any], prompt_key_column: str | None) -> Hashable:
    """A dataset row's prompt key: its ``prompt_key_column`` value, else the `row_prompt_key` rule."""
    if prompt_key_column is not None:
        return hashable_key(row[prompt_key_column])
    return row_prompt_key(row, None)


def check_sampling_dataset(
    dataset: Any,
    strategy: Strategy,
    domain_key: str,
    prompt_key_column: str | None,
    domain_source: str | None = None,
) -> None:
    """Fail at build time when the train dataset cannot feed a mixing / pre-rollout sampler.

    ``domain_source`` says where ``domain_key`` came from (`dataflex_callbacks.host.resolve_domain_key`), so the
    error names the setting to change.
    """
    if not acts_before_rollout(strategy) or dataset is None:
        return
    iterable = any(cls.__name__ == "IterableDataset" for cls in type(dataset).__mro__)
    if iterable or not hasattr(dataset, "column_names"):
        raise ConfigError(
            f"dataflex: strategy {strategy.name!r} chooses prompts before rollout (mix / pre_select), which needs a "
            f"map-style datasets.Dataset; got a {type(dataset).__name__}. Load the data as a datasets.Dataset, or "
            "for streaming data mix with datasets.interleave_datasets(per_domain, probabilities=[...]) and drop the "
            "strategy's mix part"
        )
    columns = list(dataset.column_names)
    if strategy.mix_enabled and domain_key not in columns:
        if domain_source is not None and "config's domain_key" in domain_source:
            fix = "set domain_key in the strategy config to the column holding each prompt's domain"
        else:
            fix = "pass domain_key=<the column holding each prompt's domain> (or set domain_key in the strategy config)"
        raise ConfigError(
            f"dataflex: the strategy's mix part needs the domain column {domain_key!r} "
            f"({domain_source or 'domain_key'}); the train dataset has {columns}; {fix}"
        )
    if prompt_key_column is not None and prompt_key_column not in columns:
        raise ConfigError(
            f"dataflex: prompt_key_column={prompt_key_column!r} is not a column of the train dataset {columns}"
        )


def grpo_mixing_sampler(
    trainer, dataset: Any, strategy: Strategy, domain_key: str, prompt_key_column: str | None
) -> DomainMixingSampler:
    """A `DomainMixingSampler` with TRL's ``RepeatSampler`` layout for ``trainer`` (see module docstring)."""
    args = trainer.args
    columns = list(getattr(dataset, "column_names", None) or [])
    # Null labels are refused with their row (not turned into a domain called 'None').
    domains = domain_labels(dataset, domain_key, required=False) if domain_key in columns else None
    if strategy.mix_enabled:
        labels = domains
    else:  # pre-rollout selection alone draws from one pool, like RepeatSampler; domains only inform its prior
        labels = [NO_DOMAIN] * len(dataset)
    return DomainMixingSampler(
        dataset,
        labels=labels,
        prompt_key_column=prompt_key_column,
        prompt_labels=domains,
        batch_size=args.generation_batch_size // trainer.num_generations,
        num_generations=trainer.num_generations,
        repeat_count=trainer.num_iterations * args.steps_per_generation,
        layout="grpo",
        num_replicas=1,
        rank=0,
        strategy=strategy,
        seed=args.seed,
        resume="replay",
    )
