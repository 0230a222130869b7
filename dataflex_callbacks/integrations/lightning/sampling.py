"""The prompt sampler of a Lightning run, built from a LightningModule, a LightningDataModule
or any code holding the trainer.

``self.dataflex.sampler(dataset, batch_size=B)`` in a module and ``build_sampler(self.trainer,
dataset, batch_size=B)`` in a data module build the same thing: a `DomainMixingSampler` that

- gives each rank different rows of one global draw (``layout="shard"``), and is a
  ``DistributedSampler`` to Lightning, which therefore keeps it as it is under DDP
  (``use_distributed_sampler`` may stay at its default);
- follows the strategy's mixer when the strategy has a ``mix`` part, and otherwise draws all rows
  as one pool, so the data keeps its own domain distribution (a ``pre_select`` filter's skipped
  prompts are replaced by prompts of any domain; the domain column only feeds its prior);
- reads domains from the config's ``domain_key`` (default ``"domain"``);
- is restored from the checkpoint by the callback before the first batch is drawn.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from torch.utils.data.distributed import DistributedSampler

from dataflex_callbacks import ConfigError, DataFlexError, DomainMixingSampler, Strategy
from dataflex_callbacks.host import resolve_domain_key
from dataflex_callbacks.rollout.prompt_keys import KEY_COLUMNS, hashable_key

SAMPLER_FIXED = ("layout", "resume", "strategy", "num_replicas", "rank")


class ShardedSampler(DomainMixingSampler, DistributedSampler):
    """A rank-sharded `DomainMixingSampler` that Lightning recognises as distributed.

    Lightning wraps every train sampler that is not a ``DistributedSampler`` in its
    ``DistributedSamplerWrapper``, which draws a whole epoch up front; being one, this sampler is
    left alone and mixes between steps. Build it with `build_sampler`.
    """

    shuffle = True  # read by code that inspects DistributedSamplers; draws are random
    drop_last = True  # an epoch is whole global chunks


def make_sampler(
    strategy: Strategy,
    dataset: Any,
    *,
    batch_size: int,
    seed: int,
    world_size: int,
    rank: int,
    options: Mapping[str, Any],
) -> ShardedSampler:
    """A `ShardedSampler` for ``strategy`` on rank ``rank`` of ``world_size`` (the body of `callback.build_sampler`).

    Without a mix part (and without ``proportions``) `DomainMixingSampler` draws all rows as one
    pool; its domain labels then feed only a pre-rollout filter's prior.
    """
    options = dict(options)
    fixed = sorted(set(options) & set(SAMPLER_FIXED))
    if fixed:
        raise ConfigError(
            f"the Lightning sampler sets {', '.join(fixed)} itself; remove them, or build a "
            "DomainMixingSampler(layout='shard', resume='continue', ...) and pass it to "
            "DataFlexCallback(sampler=...)"
        )
    options["domain_key"], _ = resolve_domain_key(strategy, options.get("domain_key"), argument="domain_key")
    try:
        return ShardedSampler(
            dataset,
            batch_size=batch_size,
            seed=seed,
            layout="shard",
            num_replicas=world_size,
            rank=rank,
            strategy=strategy,
            resume="continue",
            **options,
        )
    except ConfigError as error:
        if getattr(error, "prompts_needed", None) is None:
            raise
        raise ConfigError(
            too_few_prompts_message(error.prompts_available, batch_size, world_size, options.get("num_samples"))
        ) from error


def too_few_prompts_message(available: int, batch_size: int, world_size: int, num_samples: int | None = None) -> str:
    """One line in the Lightning user's settings: the prompts to draw from against the prompts one step needs."""
    source = f"num_samples={num_samples}" if num_samples is not None else "the dataset"
    return (
        f"dataflex: {source} gives {available} prompt(s) to draw from, but one training step draws "
        f"batch_size={batch_size} distinct prompts on each of the Trainer's {world_size} process(es) (its "
        f"world_size: devices x num_nodes), {batch_size * world_size} in all, so the run would train nothing; add "
        "prompts, or lower the batch_size given to self.dataflex.sampler(...) / build_sampler(...) (and the "
        "DataLoader's)"
    )


# ------------------------------------------------------------ prompt keys


def sampler_keys(sampler: DomainMixingSampler) -> frozenset | None:
    """The prompt keys ``sampler`` names its rows by (None when it keeps none: no pre-rollout filter)."""
    keys = sampler.prompt_keys
    return None if keys is None else frozenset(keys)


def key_rule(sampler: DomainMixingSampler) -> str:
    """How ``sampler`` names a row, in words."""
    column = sampler.prompt_key_column
    if column is not None:
        return f"its {column!r} field"
    first, second = KEY_COLUMNS
    return f"its {first!r} field, else its {second!r} field, else its row index"


def check_prompt_keys(keys: Sequence[Hashable], known: frozenset, sampler: DomainMixingSampler) -> None:
    """Raise when a step's ``prompt_keys`` hold keys ``sampler`` never issued (a different key rule).

    Pre-rollout selection looks a drawn row up by the sampler's key; history recorded under other
    keys is never found, so nothing would ever be skipped, silently.
    """
    unknown = sorted({hashable_key(key) for key in keys} - known, key=repr)
    if not unknown:
        return
    examples = sorted(known, key=repr)[:3]
    raise DataFlexError(
        f"RolloutBatch.prompt_keys {unknown[:3]} are not keys the prompt sampler issues, so pre-rollout selection "
        f"can never match its history to the prompts it draws; the sampler names a row by {key_rule(sampler)} "
        f"(e.g. {examples}). Pass prompt_keys by the same rule (one per response), or build the sampler with "
        "prompt_key_column='<the field you pass>'"
    )
