"""Vectorised per-group reductions (segment ops): no Python loop over groups.

The segment ops take a dense group index ``(N,)`` in ``[0, G)`` from `dense_groups`; the per-row
reductions at the end (`group_solve_rate`, `group_reward_variance`, `advantage_magnitude`) take
the batch's signals directly, and are what the scorers and the domain tracker both compute. All work
the same on CPU and CUDA tensors.
"""

from __future__ import annotations

import torch

from dataflex_callbacks.rollout.batch import masked_abs_row_reduce, row_counts


def dense_groups(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids ``(N,)`` to a dense index ``(N,)`` in ``[0, G)`` and return ``G``."""
    if group_ids.numel() == 0:
        return group_ids.new_zeros(0, dtype=torch.long), 0
    step = group_ids[1:] != group_ids[:-1]
    if bool((group_ids[1:] >= group_ids[:-1]).all()):
        # Contiguous, sorted ids (the GRPO layout): a running count of id changes, no sort needed.
        index = torch.cat([step.new_zeros(1, dtype=torch.long), torch.cumsum(step, 0)])
        return index, int(index[-1]) + 1
    unique, index = torch.unique(group_ids, return_inverse=True)
    return index, unique.numel()


def segment_sum(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum of ``values (N,)`` per group -> ``(G,)``."""
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)


def group_sizes(index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Number of members per group -> ``(G,)`` float."""
    return torch.bincount(index, minlength=num_groups).to(torch.float32)


def segment_mean(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Mean of ``values (N,)`` per group -> ``(G,)``."""
    return segment_sum(values, index, num_groups) / group_sizes(index, num_groups).clamp_min(1).to(values.dtype)


def segment_max(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Largest of ``values (N,)`` per group -> ``(G,)`` (-inf for an empty group)."""
    out = torch.full((num_groups,), float("-inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, index, values, reduce="amax")


def segment_min(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Smallest of ``values (N,)`` per group -> ``(G,)`` (+inf for an empty group)."""
    out = torch.full((num_groups,), float("inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, index, values, reduce="amin")


def every_group_equal(values: torch.Tensor, group_ids: torch.Tensor) -> bool:
    """Whether every group of ``group_ids`` ``(N,)`` has one value in ``values`` ``(N,)``: no group carries a learning
    signal (a group with a NaN counts as not equal). Rows of a group need not be adjacent."""
    index, groups = dense_groups(group_ids.to(values.device))
    values = values.to(torch.float32)
    return bool((segment_min(values, index, groups) == segment_max(values, index, groups)).all())


def segment_variance(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Population variance of ``values (N,)`` per group -> ``(G,)``; exactly 0 where a group's values are equal.

    Two passes (no cancellation). A group of equal continuous values (0.1 eight times) would
    otherwise get a rounding residue like 1e-17, and a ``variance > 0`` filter would keep it.
    """
    mean = segment_mean(values, index, num_groups)
    centred = values - mean[index]
    variance = segment_mean(centred * centred, index, num_groups)
    constant = segment_max(values, index, num_groups) == segment_min(values, index, num_groups)
    return variance.masked_fill(constant, 0.0)


def sort_within_groups(values: torch.Tensor, index: torch.Tensor, descending: bool = False) -> torch.Tensor:
    """Permutation ordering rows by group, then by value; ties keep row order (deterministic)."""
    n = values.shape[0]
    if n and n % (int(index[-1]) + 1) == 0:
        groups = int(index[-1]) + 1
        size = n // groups
        if torch.equal(index, torch.arange(n, device=index.device) // size):
            # Equal contiguous groups: one batched sort of a (groups, size) view.
            rows = torch.sort(values.view(groups, size), dim=1, descending=descending, stable=True).indices
            return (rows + torch.arange(groups, device=index.device).unsqueeze(1) * size).flatten()
    by_value = torch.sort(values, descending=descending, stable=True).indices
    by_group = torch.sort(index[by_value], stable=True).indices
    return by_value[by_group]


def rank_within_groups(order: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Given `sort_within_groups`' permutation, each row's 0-based rank inside its group -> ``(N,)``."""
    sizes = torch.bincount(index, minlength=num_groups)
    starts = torch.cumsum(sizes, 0) - sizes
    positions = torch.arange(order.numel(), device=order.device)
    ranks = torch.empty_like(positions)
    ranks[order] = positions - starts[index[order]]
    return ranks


# ---------------------------------------------------------------- per-row reductions of a batch's signals


def group_solve_rate(rewards: torch.Tensor, group_ids: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """Share of responses in each row's group with reward above ``threshold``: ``(N,)``."""
    index, count = dense_groups(group_ids)
    solved = (rewards > threshold).to(torch.float32)
    return segment_mean(solved, index, count)[index]


def group_reward_variance(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Population variance of rewards in each row's group: ``(N,)``."""
    index, count = dense_groups(group_ids)
    return segment_variance(rewards.to(torch.float32), index, count)[index]


def advantage_magnitude(
    advantages: torch.Tensor, valid_mask: torch.Tensor | None, reduce: str = "mean"
) -> torch.Tensor:
    """Mean, sum or max over valid tokens of ``|A_it|``: ``(N,)``; ``(N,)`` advantages count per token.

    Args:
        advantages: ``(N,)`` or ``(N, L)`` float.
        valid_mask: ``(N, L)`` bool, or None (every token valid).
        reduce: ``mean`` (a row without valid tokens scores 0), ``sum`` or ``max``.
    """
    if advantages.dim() == 1:
        magnitude = advantages.to(torch.float32).abs()
        if reduce == "sum" and valid_mask is not None:
            return magnitude * row_counts(valid_mask)
        return magnitude
    total, counts = masked_abs_row_reduce(advantages, valid_mask, reduce)
    if reduce == "mean":
        return total / counts.clamp_min(1)
    return total
