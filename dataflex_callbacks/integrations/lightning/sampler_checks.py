"""Find the `DomainMixingSampler` in a Lightning train dataloader and reject set-ups that would break it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from dataflex_callbacks import ConfigError, DomainMixingSampler, Strategy

FIX = (
    "build it in train_dataloader() with self.dataflex.sampler(dataset, batch_size=B) (in a LightningDataModule: "
    "build_sampler(self.trainer, dataset, batch_size=B)) and pass it to DataLoader(dataset, batch_size=B, sampler=...)"
)


def _dataloaders(loaders: Any) -> Iterator[DataLoader]:
    if isinstance(loaders, DataLoader):
        yield loaders
    elif isinstance(loaders, dict):
        for value in loaders.values():
            yield from _dataloaders(value)
    elif isinstance(loaders, (list, tuple)):
        for value in loaders:
            yield from _dataloaders(value)


def _sampler_of(loader: DataLoader) -> Any:
    batch_sampler = loader.batch_sampler
    return getattr(batch_sampler, "sampler", batch_sampler) if batch_sampler is not None else loader.sampler


def check_distributed_data(loaders: Any, world_size: int) -> None:
    """Under DDP, refuse a train DataLoader that would give every rank the same prompts.

    With ``Trainer(use_distributed_sampler=False)`` Lightning leaves a plain ``DataLoader``'s
    ``RandomSampler`` / ``SequentialSampler`` as it is, so each rank iterates the whole dataset in
    the same order and trains on the same prompts. Samplers that shard (``DistributedSampler``,
    the DataFlex sampler) pass; other custom samplers without ``num_replicas`` / ``rank`` get a
    warning, iterable datasets are left to the user (they must shard themselves).
    """
    if world_size <= 1:
        return
    for loader in _dataloaders(loaders):
        if isinstance(loader.dataset, IterableDataset):
            continue
        sampler = _sampler_of(loader)
        if isinstance(sampler, (DistributedSampler, DomainMixingSampler)):
            continue
        if isinstance(sampler, (RandomSampler, SequentialSampler)):
            raise ConfigError(
                f"every one of the {world_size} ranks would train on the same prompts: the train DataLoader's "
                f"{type(sampler).__name__} is not sharded by rank (Trainer(use_distributed_sampler=False) keeps it). "
                "Remove use_distributed_sampler=False (Lightning then shards it), or " + FIX
            )
        if not (hasattr(sampler, "num_replicas") and hasattr(sampler, "rank")):
            rank_zero_warn(
                f"dataflex: the train sampler {type(sampler).__name__} has no num_replicas / rank; if it "
                f"does not shard by rank, all {world_size} ranks train on the same prompts"
            )


def find_mixing_sampler(loaders: Any) -> tuple[DomainMixingSampler, DataLoader] | None:
    """The `DomainMixingSampler` of a (possibly nested) train dataloader, with its `DataLoader`.

    Raises `ConfigError` when Lightning wrapped it in its ``DistributedSamplerWrapper``: that
    wrapper materialises a whole epoch up front and shards it again, so the mixer's proportions
    would never reach the data.
    """
    for loader in _dataloaders(loaders):
        for candidate in (loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
            if isinstance(candidate, DomainMixingSampler):
                return candidate, loader
            inner = getattr(getattr(candidate, "dataset", None), "_sampler", None)  # DistributedSamplerWrapper
            if isinstance(inner, DomainMixingSampler):
                raise ConfigError(
                    "Lightning replaced the DomainMixingSampler with its DistributedSamplerWrapper, which draws a "
                    "whole epoch before training and shards it again, so the strategy cannot act between steps. "
                    "Build the sampler with self.dataflex.sampler(...) (Lightning keeps that one as it is), or set "
                    "Trainer(use_distributed_sampler=False) for a DomainMixingSampler(layout='shard') you built"
                )
    return None


def check_mixing_sampler(
    sampler: DomainMixingSampler, loader_batch_size: int | None, strategy: Strategy, world_size: int
) -> None:
    """Raise `ConfigError` naming the fix when ``sampler`` cannot serve a Lightning run of ``world_size`` ranks."""
    if world_size > 1 and sampler.layout != "shard":
        raise ConfigError(
            f"DomainMixingSampler(layout={sampler.layout!r}) gives every one of the {world_size} ranks the same rows; "
            f"under DDP use layout='shard': {FIX}"
        )
    if sampler.layout == "shard" and sampler.num_replicas != world_size:
        raise ConfigError(
            f"DomainMixingSampler shards for num_replicas={sampler.num_replicas} but the Trainer runs "
            f"{world_size} rank(s); {FIX}"
        )
    if sampler.resume != "continue":
        raise ConfigError(
            f"DomainMixingSampler(resume={sampler.resume!r}): a resumed Lightning run expects the stream "
            f"to continue where it stopped, use resume='continue'; {FIX}"
        )
    if loader_batch_size != sampler.batch_size:
        raise ConfigError(
            f"the DataLoader's batch_size={loader_batch_size} differs from the sampler's "
            f"batch_size={sampler.batch_size}; one sampler chunk must be one training batch ({FIX})"
        )
    if strategy.mix_enabled and sampler.strategy is not strategy:
        raise ConfigError(
            "the DomainMixingSampler follows a different strategy (or none) than the DataFlexCallback, "
            f"so the callback's mixer would not steer it; {FIX}"
        )
