"""Random rollout batches for testing components: `random_batch`, sub-batches, device moves, ``nan_policy`` cleaning.

What `dataflex_callbacks.testing.check_component` feeds a component; usable in a user's own tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from dataflex_callbacks.rollout.batch import RolloutBatch, clean_signals
from dataflex_callbacks.strategy.strategy import CHECKED_SIGNALS

BATCH_FIELDS = tuple(f.name for f in dataclasses.fields(RolloutBatch) if not f.name.startswith("_"))


def random_batch(
    seed: int,
    *,
    domains: Sequence[str] = ("math", "code"),
    binary: bool = True,
    token_advantages: bool = False,
    nonfinite: bool = False,
) -> RolloutBatch:
    """A random `RolloutBatch` with every field: 7 groups of 1 to 6 responses, rows interleaved, lengths 0 to 8.

    Group ids are sparse integers; one group's rewards are all equal, one row has no valid
    token and a few valid tokens have log-prob ``-inf``. ``nonfinite`` plants NaN and infinite
    values in ``rewards``, ``advantages``, ``logprobs`` and ``entropies`` (see `cleaned_signals`).
    """
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 7, (7,), generator=gen)
    sizes[0] = 1
    ids = torch.randperm(50, generator=gen)[:7] * 3 + 1
    order = torch.randperm(int(sizes.sum()), generator=gen)
    group_ids = torch.repeat_interleave(ids, sizes)[order]
    n, length = group_ids.shape[0], 8
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    lengths[0] = 0
    mask = torch.arange(length) < lengths.unsqueeze(1)
    rewards = (torch.rand(n, generator=gen) > 0.5).float() if binary else torch.rand(n, generator=gen) * 2 - 0.5
    rewards[group_ids == ids[1]] = 1.0
    advantages = torch.randn(n, length, generator=gen) * mask if token_advantages else torch.randn(n, generator=gen)
    logprobs = -torch.rand(n, length, generator=gen) * 3
    logprobs[1:4, 0] = float("-inf")  # impossible tokens: a value, not an error
    entropies = torch.rand(n, length, generator=gen) * 2
    labels = {int(g): domains[i % len(domains)] for i, g in enumerate(ids)}
    if nonfinite:
        rewards[2], rewards[5] = float("nan"), float("inf")
        advantages[3] = float("-inf")
        logprobs[4, 0], logprobs[6, 0] = float("nan"), float("inf")
        entropies[7, 0] = float("nan")
    return RolloutBatch(
        rewards,
        group_ids=group_ids,
        completion_mask=mask,
        advantages=advantages,
        logprobs=logprobs,
        entropies=entropies,
        domains=[labels[int(g)] for g in group_ids],
        prompt_keys=[f"prompt-{int(g)}" for g in group_ids],
        completion_ids=torch.randint(0, 5, (n, length), generator=gen),
        policy_versions=torch.randint(0, 4, (n,), generator=gen),
        trainer_version=4,
    )


def cleaned_signals(batch: RolloutBatch) -> tuple[RolloutBatch, torch.Tensor]:
    """``batch`` as a strategy's ``nan_policy`` hands it to components, and the ``(N,)`` bool rows it flags.

    Non-finite entries become 0 (``-inf`` log-probs stay); under ``nan_policy='drop'`` the flagged
    rows then leave the loss (``nan_policy='raise'`` stops before any component runs).
    """
    names = [name for name in CHECKED_SIGNALS if getattr(batch, name) is not None]
    cleaned, bad_rows, _ = clean_signals(batch, names, "zero")
    if bad_rows is None:
        bad_rows = torch.zeros(batch.n, dtype=torch.bool, device=batch.device)
    return cleaned, bad_rows


def drop_policy_batch(batch: RolloutBatch) -> RolloutBatch:
    """What a strategy with ``nan_policy='drop'`` feeds its tracker: cleaned signals, NaN rewards on flagged rows."""
    cleaned, bad = cleaned_signals(batch)
    return cleaned.replace(rewards=cleaned.rewards.masked_fill(bad, float("nan"))) if bool(bad.any()) else cleaned


def batch_rows(batch: RolloutBatch, rows: torch.Tensor) -> RolloutBatch:
    """The sub-batch of ``rows`` ``(n,)`` long, in that order."""
    values: dict[str, Any] = {}
    for name in BATCH_FIELDS:
        value = getattr(batch, name)
        if isinstance(value, torch.Tensor):
            value = value[rows.to(value.device)]
        elif value is not None and name != "trainer_version":
            value = [value[i] for i in rows.tolist()]
        values[name] = value
    return RolloutBatch(**values)


def batch_to(batch: RolloutBatch, device: str | torch.device) -> RolloutBatch:
    """``batch`` with every tensor moved to ``device``."""
    values: dict[str, Any] = {name: getattr(batch, name) for name in BATCH_FIELDS}
    moved: dict[str, Any] = {
        name: value.to(device) if isinstance(value, torch.Tensor) else value for name, value in values.items()
    }
    return RolloutBatch(**moved)
