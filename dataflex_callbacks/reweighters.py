"""Reweighters: scores -> non-negative weights multiplied into the per-token loss.

Weights are normalised by default to mean 1 over the entries they apply to (kept responses, or
kept valid tokens), so the loss scale and effective learning rate stay those of the unweighted
run; only relative emphasis changes. ``normalize``: ``mean_one`` (default),
``per_group_mean_one`` or ``none``. Entries outside the mask get weight 0.
"""

from __future__ import annotations

import torch

from .batch import RolloutBatch
from .errors import BatchError
from .groups import dense_groups, segment_sum
from .params import check_choice, check_number
from .registry import register
from .scorers import check_score_shape

NORMALIZE_MODES = ("mean_one", "per_group_mean_one", "none")


def normalize_weights(raw: torch.Tensor, mask: torch.Tensor, mode: str = "mean_one",
                      group_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Zero ``raw`` outside ``mask`` and rescale it to mean 1 over ``mask`` (globally or per group).

    A normalisation set whose raw weights sum to 0 gets uniform weight 1: there is no emphasis to
    keep, and a zero scale would silently drop data the selector kept.
    """
    weights = torch.where(mask, raw.to(torch.float32), torch.zeros((), device=raw.device))
    if mode == "none":
        return weights
    maskf = mask.to(torch.float32)
    if mode == "mean_one":
        total, count = weights.sum(), maskf.sum()
        if float(count) == 0:
            return weights
        if float(total) <= 0:
            return maskf
        return weights * (count / total)
    if group_ids is None:
        raise BatchError("normalize='per_group_mean_one' needs RolloutBatch.group_ids")
    index, groups = dense_groups(group_ids)
    row_total = weights.sum(dim=1) if weights.dim() == 2 else weights
    row_count = maskf.sum(dim=1) if maskf.dim() == 2 else maskf
    total = segment_sum(row_total, index, groups)[index]
    count = segment_sum(row_count, index, groups)[index]
    scale = torch.where(total > 0, count / total.clamp_min(1e-30), torch.zeros_like(total))
    fallback = (total <= 0) & (count > 0)
    if weights.dim() == 2:
        scale, fallback = scale.unsqueeze(1), fallback.unsqueeze(1)
    return torch.where(fallback, maskf, weights * scale)


class Reweighter:
    """Base class: ``weights(scores, batch, mask=None) -> Tensor`` shaped like the scores."""

    name = "reweighter"
    granularity = "response"
    needs_groups = False

    def __init__(self, normalize: str = "mean_one"):
        self.normalize = check_choice("normalize", normalize, NORMALIZE_MODES)
        if self.normalize == "per_group_mean_one":
            self.needs_groups = True

    def weights(self, scores: torch.Tensor, batch: RolloutBatch, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Weights ``(N,)`` or ``(N, L)`` (as the scores), zero outside ``mask``, normalised per ``normalize``."""
        check_score_shape("reweighter", self.name, self.granularity, scores)
        want_dim = scores.dim()
        if mask is None:
            mask = batch.valid_mask if want_dim == 2 else torch.ones(batch.n, dtype=torch.bool, device=batch.device)
        elif want_dim == 2 and mask.dim() == 1:
            mask = mask.unsqueeze(1) & batch.valid_mask
        raw = self._raw(scores.to(torch.float32), mask)
        return normalize_weights(raw, mask, self.normalize, batch.group_ids)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


@register("reweighter", "softmax")
class SoftmaxWeights(Reweighter):
    """w_i proportional to exp(score_i / temperature)."""

    def __init__(self, temperature: float = 1.0, normalize: str = "mean_one"):
        super().__init__(normalize)
        self.temperature = check_number("temperature", temperature, low=0.0, low_open=True)

    def _raw(self, scores, mask):
        logits = (scores / self.temperature).masked_fill(~mask, float("-inf"))
        if not bool(mask.any()):
            return torch.zeros_like(scores)
        return torch.exp(logits - logits.max())


@register("reweighter", "difficulty_band")
class DifficultyBand(Reweighter):
    """focus_weight inside the [low_q, high_q] quantile band of the scores, 1 outside."""

    def __init__(self, low_q: float = 0.25, high_q: float = 0.75, focus_weight: float = 2.0, normalize: str = "mean_one"):
        super().__init__(normalize)
        self.low_q = check_number("low_q", low_q, low=0.0, high=1.0)
        self.high_q = check_number("high_q", high_q, low=0.0, high=1.0)
        if self.low_q > self.high_q:
            raise ValueError(f"parameter 'low_q' ({self.low_q}) must not exceed 'high_q' ({self.high_q})")
        self.focus_weight = check_number("focus_weight", focus_weight, low=0.0)

    def _raw(self, scores, mask):
        inside_values = scores[mask]
        if inside_values.numel() == 0:
            return torch.zeros_like(scores)
        bounds = torch.quantile(inside_values, torch.tensor([self.low_q, self.high_q], device=scores.device))
        in_band = (scores >= bounds[0]) & (scores <= bounds[1])
        return torch.where(in_band, torch.full_like(scores, self.focus_weight), torch.ones_like(scores))


@register("reweighter", "reward_range")
class RewardRange(Reweighter):
    """`inside` weight when low <= score <= high, `outside` weight otherwise."""

    def __init__(self, low: float = 0.2, high: float = 0.8, inside: float = 2.0, outside: float = 1.0,
                 normalize: str = "mean_one"):
        super().__init__(normalize)
        self.low = check_number("low", low)
        self.high = check_number("high", high)
        if self.low > self.high:
            raise ValueError(f"parameter 'low' ({self.low}) must not exceed 'high' ({self.high})")
        self.inside = check_number("inside", inside, low=0.0)
        self.outside = check_number("outside", outside, low=0.0)

    def _raw(self, scores, mask):
        in_range = (scores >= self.low) & (scores <= self.high)
        return torch.where(in_range, torch.full_like(scores, self.inside), torch.full_like(scores, self.outside))


@register("reweighter", "advantage_reweight")
class AdvantageReweight(Reweighter):
    """Token weight alpha*p_it + (1-alpha), p_it the token probability: damps low-probability tokens."""

    granularity = "token"

    def __init__(self, alpha: float = 0.3, normalize: str = "mean_one"):
        super().__init__(normalize)
        self.alpha = check_number("alpha", alpha, low=0.0, high=1.0)

    def _raw(self, scores, mask):
        return self.alpha * scores + (1.0 - self.alpha)


@register("reweighter", "per_advantage")
class PrioritizedAdvantage(Reweighter):
    """w_i = |score_i|^alpha, prioritized-replay style (score: advantage magnitude)."""

    def __init__(self, alpha: float = 0.6, normalize: str = "mean_one"):
        super().__init__(normalize)
        self.alpha = check_number("alpha", alpha, low=0.0)

    def _raw(self, scores, mask):
        return scores.abs().pow(self.alpha)
