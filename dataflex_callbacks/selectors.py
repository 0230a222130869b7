"""Selectors: scores -> keep mask, ``(N,)`` for responses or ``(N, L)`` for tokens.

A dropped response leaves the loss and its normaliser; the host adapters guarantee that.
Ties are broken by row order, so a decision never depends on the sort implementation.
"""

from __future__ import annotations

import torch

from .batch import RolloutBatch
from .errors import BatchError
from .groups import dense_groups, rank_within_groups, sort_within_groups
from .params import check_choice, check_int, check_number
from .registry import register
from .scorers import check_score_shape


def _round_half_up(values: torch.Tensor) -> torch.Tensor:
    return torch.floor(values + 0.5)

# ---------------------------------------------------------------- pure functions


def threshold_band(scores: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Keep ``low < s < high`` (open interval): ``(N,)`` bool."""
    return (scores > low) & (scores < high)


def topk_fraction(scores: torch.Tensor, fraction: float, largest: bool = True) -> torch.Tensor:
    """Keep the ``round(fraction * N)`` (at least 1) best scores; ties go to the earlier row."""
    n = scores.shape[0]
    keep = torch.zeros(n, dtype=torch.bool, device=scores.device)
    if n == 0:
        return keep
    k = max(1, min(n, int(fraction * n + 0.5)))
    order = torch.sort(scores, descending=largest, stable=True).indices
    keep[order[:k]] = True
    return keep


def top_within_groups(metric: torch.Tensor, group_ids: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest ``metric`` values in every group (whole group if smaller): ``(N,)``."""
    index, count = dense_groups(group_ids)
    order = sort_within_groups(metric, index, descending=True)
    return rank_within_groups(order, index, count) < k


def max_variance_subset(scores: torch.Tensor, group_ids: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """Per group of size G, keep the ``n = round(f * G)`` responses whose scores have maximal variance.

    The optimum is the ``a`` lowest plus the ``n - a`` highest scores for some ``a`` (PODS,
    arXiv 2504.13818); every ``a`` is evaluated at once from prefix sums over the sorted groups.
    """
    n_rows = scores.shape[0]
    if n_rows == 0:
        return torch.zeros(0, dtype=torch.bool, device=scores.device)
    index, count = dense_groups(group_ids)
    values = scores.to(torch.float64)
    order = sort_within_groups(values, index)
    sorted_values = values[order]
    sizes = torch.bincount(index, minlength=count)
    starts = torch.cumsum(sizes, 0) - sizes
    n_keep = _round_half_up(keep_fraction * sizes.to(torch.float64)).long().clamp(min=1)
    n_keep = torch.minimum(n_keep, sizes)

    zero = values.new_zeros(1)
    prefix = torch.cat([zero, torch.cumsum(sorted_values, 0)])
    prefix_sq = torch.cat([zero, torch.cumsum(sorted_values * sorted_values, 0)])
    candidates = torch.arange(int(n_keep.max()) + 1, device=scores.device)  # a = 0 .. max n
    a = candidates.unsqueeze(0).expand(count, -1)
    allowed = a <= n_keep.unsqueeze(1)
    start = starts.unsqueeze(1)
    low_end = (start + a).clamp(max=n_rows)
    high_begin = (start + sizes.unsqueeze(1) - n_keep.unsqueeze(1) + a).clamp(max=n_rows)
    group_end = (starts + sizes).unsqueeze(1)
    total = (prefix[low_end] - prefix[start]) + (prefix[group_end] - prefix[high_begin])
    total_sq = (prefix_sq[low_end] - prefix_sq[start]) + (prefix_sq[group_end] - prefix_sq[high_begin])
    size_kept = n_keep.unsqueeze(1).to(torch.float64)
    variance = total_sq / size_kept - (total / size_kept) ** 2
    variance = variance.masked_fill(~allowed, float("-inf"))
    best_a = torch.argmax(variance, dim=1)  # first maximum: the smallest a wins ties

    rank = rank_within_groups(order, index, count)
    row_best = best_a[index]
    return (rank < row_best) | (rank >= sizes[index] - n_keep[index] + row_best)


def top_tokens(scores: torch.Tensor, valid_mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Keep the top ``round(fraction * valid tokens)`` (at least 1) valid tokens by score: ``(N, L)``.

    Uses a k-th value threshold (linear time); ties at the threshold go to earlier tokens in
    row-major order.
    """
    keep = torch.zeros_like(valid_mask, dtype=torch.bool)
    flat_valid = valid_mask.reshape(-1)
    n_valid = int(flat_valid.sum())
    if n_valid == 0:
        return keep
    k = max(1, min(n_valid, int(fraction * n_valid + 0.5)))
    flat_scores = scores.reshape(-1).to(torch.float32)
    valid_scores = flat_scores[flat_valid]
    if valid_scores.is_cuda:
        # CUDA kthvalue on ~1e8 entries is ~100x slower than a full sort; both give the same value.
        threshold = torch.sort(valid_scores, descending=True).values[k - 1]
    else:
        threshold = torch.kthvalue(valid_scores, n_valid - k + 1).values
    above = flat_valid & (flat_scores > threshold)
    at = flat_valid & (flat_scores == threshold)
    room = k - int(above.sum())
    at_rank = torch.cumsum(at.to(torch.int64), 0)
    flat_keep = above | (at & (at_rank <= room))
    return flat_keep.view_as(valid_mask)


# ---------------------------------------------------------------- registered selectors


class Selector:
    """Base class: ``select(scores, batch) -> keep mask``."""

    name = "selector"
    granularity = "response"
    needs_groups = False
    requires: tuple[str, ...] = ()

    def select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        check_score_shape("selector", self.name, self.granularity, scores)
        for field_name in self.requires:
            if not batch.has(field_name):
                raise BatchError(f"selector {self.name!r} needs RolloutBatch.{field_name}, which this batch does not have")
        return self._select(scores, batch)

    def _select(self, scores, batch):  # pragma: no cover - abstract
        raise NotImplementedError


@register("selector", "threshold_band")
class ThresholdBand(Selector):
    """Keep responses with low < score < high (DAPO dynamic sampling; online difficulty filtering)."""

    def __init__(self, low: float = 0.0, high: float = 1.0):
        self.low = check_number("low", low)
        self.high = check_number("high", high)
        if self.low >= self.high:
            raise ValueError(f"parameter 'low' ({self.low}) must be below 'high' ({self.high})")

    def _select(self, scores, batch):
        return threshold_band(scores, self.low, self.high)


@register("selector", "topk_fraction")
class TopkFraction(Selector):
    """Keep the round(fraction*N) highest (or lowest) scoring responses, at least one."""

    def __init__(self, fraction: float = 0.5, largest: bool = True):
        self.fraction = check_number("fraction", fraction, low=0.0, high=1.0, low_open=True)
        if not isinstance(largest, bool):
            raise ValueError(f"parameter 'largest' must be true or false; got {largest!r}")
        self.largest = largest

    def _select(self, scores, batch):
        return topk_fraction(scores, self.fraction, self.largest)


@register("selector", "gfpo")
class GroupFilter(Selector):
    """Keep the k shortest (metric=short) or most reward-per-token (efficiency) responses per group (GFPO)."""

    needs_groups = True
    requires = ("group_ids",)

    def __init__(self, k: int = 3, metric: str = "efficiency"):
        self.k = check_int("k", k, low=1)
        self.metric = check_choice("metric", metric, ("short", "efficiency", "score"))
        if self.metric != "score":
            self.requires = ("group_ids", "completion_mask")

    def _select(self, scores, batch):
        if self.metric == "short":
            metric = -batch.lengths
        elif self.metric == "efficiency":
            metric = batch.rewards.to(torch.float32).nan_to_num(0.0) / batch.lengths.clamp_min(1)
        else:
            metric = scores
        return top_within_groups(metric, batch.group_ids, self.k)


@register("selector", "max_variance")
class MaxVariance(Selector):
    """Keep the round(f*G)-subset of each group with maximal score variance (PODS down-sampling)."""

    needs_groups = True
    requires = ("group_ids",)

    def __init__(self, keep_fraction: float = 0.5):
        self.keep_fraction = check_number("keep_fraction", keep_fraction, low=0.0, high=1.0, low_open=True)

    def _select(self, scores, batch):
        return max_variance_subset(scores, batch.group_ids, self.keep_fraction)


@register("selector", "entropy_top_tokens")
class EntropyTopTokens(Selector):
    """Keep only the top fraction of highest-score (entropy) valid tokens in the loss (80/20 rule)."""

    granularity = "token"
    requires = ("completion_mask",)

    def __init__(self, fraction: float = 0.2):
        self.fraction = check_number("fraction", fraction, low=0.0, high=1.0, low_open=True)

    def _select(self, scores, batch):
        return top_tokens(scores, batch.valid_mask, self.fraction)
