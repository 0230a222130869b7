"""Reweighters: scores -> non-negative weights multiplied into the per-token loss.

Weights are normalised by default to mean 1 over the entries they apply to (kept responses, or
kept valid tokens), so the loss scale and effective learning rate stay those of the unweighted
run; only relative emphasis changes. ``normalize``: ``mean_one`` (default),
``per_group_mean_one`` or ``none``. Entries outside the mask get weight 0.
"""

from __future__ import annotations

import math

import torch

from dataflex_callbacks.components._score_shape import check_score_shape
from dataflex_callbacks.config.params import check_bound, check_choice, check_number
from dataflex_callbacks.errors import BatchError, ParamError
from dataflex_callbacks.registry import Component, register, register_base
from dataflex_callbacks.rollout.batch import RolloutBatch, row_block_bounds, row_counts, true_count
from dataflex_callbacks.rollout.groups import dense_groups, segment_sum

NORMALIZE_MODES = ("mean_one", "per_group_mean_one", "none")


def normalize_weights(
    raw: torch.Tensor, mask: torch.Tensor, mode: str = "mean_one", group_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Zero ``raw`` outside ``mask`` and rescale it to mean 1 over ``mask`` (globally or per group).

    Args:
        raw: ``(N,)`` or ``(N, L)`` non-negative raw weights (left unchanged).
        mask: bool, shaped like ``raw``: the entries the weights apply to.
        mode: ``mean_one``, ``per_group_mean_one`` (needs ``group_ids``) or ``none``.

    A normalisation set whose raw weights are all 0 gets uniform weight 1: there is no emphasis to
    keep, and a zero scale would silently drop data the selector kept. Negative or non-finite raw
    weights are never hidden by the rescaling (a set summing to < 0 is left as it is), so the
    strategy's weight check refuses them, naming the reweighter.
    """
    return normalize_weights_(raw.to(torch.float32, copy=True), mask, mode, group_ids)


FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def normalize_weights_(
    weights: torch.Tensor, mask: torch.Tensor | None, mode: str = "mean_one", group_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """`normalize_weights` in place on a float32 tensor the caller owns (no ``(N, L)`` temporaries).

    ``mask=None`` means every entry (no masking work at all).
    """
    if mask is not None:
        weights.masked_fill_(~mask, 0.0)
    if mode == "none":
        return weights
    if mode == "mean_one":
        count = float(weights.numel()) if mask is None else true_count(mask)
        if count == 0:
            return weights
        total = float(weights.sum())
        if total > 0:
            scale = count / total
            if scale <= FLOAT32_MAX:
                return weights.mul_(scale)
            return weights.div_(total).mul_(count)  # a tiny total (near float32's smallest normal): scale overflows
        if total == 0 and not bool((weights < 0).any()):  # all 0 (the rare path pays for the sign check)
            return weights.fill_(1.0) if mask is None else weights.copy_(mask)
        return weights  # negative or NaN raw weights stay visible: Strategy refuses them
    if group_ids is None:
        raise BatchError("normalize='per_group_mean_one' needs RolloutBatch.group_ids")
    if mask is None:
        mask = torch.ones_like(weights, dtype=torch.bool)
    index, groups = dense_groups(group_ids)
    row_total = weights.sum(dim=1) if weights.dim() == 2 else weights
    row_count = row_counts(mask) if mask.dim() == 2 else mask.to(torch.float32)
    group_total = segment_sum(row_total, index, groups)[index]
    group_count = segment_sum(row_count, index, groups)[index]
    # A group summing to < 0 (or NaN) keeps its raw weights, negatives visible to Strategy's check.
    group_scale = torch.where(group_total > 0, group_count / group_total.clamp_min(1e-30), torch.ones_like(group_total))
    fallback = (group_total == 0) & (group_count > 0)
    if weights.dim() == 1:
        signed = segment_sum((weights < 0).to(torch.float32), index, groups)[index] > 0  # + and - cancelling to 0
        return torch.where(fallback & ~signed, mask.to(torch.float32), weights.mul_(group_scale))
    weights.mul_(group_scale.unsqueeze(1))
    rows = torch.nonzero(fallback).flatten()
    if rows.numel() and not bool((weights[rows] < 0).any()):
        weights[rows] = mask[rows].to(torch.float32)
    return weights


@register_base("reweighter")
class Reweighter(Component):
    """Base class of reweighters: subclass it and implement ``_raw`` (scores -> raw weights).

    A strategy calls ``weights(scores, batch, mask)``: ``scores`` is ``(N,)`` for
    ``granularity = "response"`` or ``(N, L)`` for ``"token"``, ``mask`` the entries the weights
    apply to (the kept responses ``(N,)``, or the kept valid tokens ``(N, L)``; None: all). It
    calls ``_raw`` and normalises the result as the ``normalize`` parameter says, so a subclass
    implements only the weighting rule:

    ``_raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor``: a *new*
    float32 tensor shaped like ``scores`` (it is normalised in place) of finite weights >= 0
    (a strategy refuses negative or non-finite weights with a `ComponentError` naming the reweighter).
    ``scores`` is float32 and may be the caller's own tensor: never modify it in place. ``mask``
    (bool, shaped like ``scores``) is None when every entry counts; entries outside it are
    zeroed afterwards.

    Its ``__init__`` takes ``normalize: str = "mean_one"`` and calls ``super().__init__(normalize)``
    (``mean_one``: mean 1 over ``mask``; ``per_group_mean_one``: mean 1 within each group;
    ``none``). Class attributes declare ``needs_groups`` and ``scope``: what a row's weight,
    relative to the others of its group, may depend on: ``"row"``, ``"group"`` or ``"batch"``
    (e.g. batch quantiles). Scores are finite (the scorer's contract). A reweighter that keeps
    state across steps defines ``state_dict()`` and ``load_state_dict(state)`` as `Scorer` says.

    Args:
        normalize: how the weights are rescaled after the rule: ``mean_one`` (mean 1 over the
            entries they apply to, so the loss scale and effective learning rate stay those of
            the unweighted run), ``per_group_mean_one`` (mean 1 within each prompt group; needs
            groups) or ``none`` (the raw weights).
    """

    name = "reweighter"
    granularity = "response"
    needs_groups = False
    scope = "group"

    def __init__(self, normalize: str = "mean_one") -> None:
        self.normalize = check_choice("normalize", normalize, NORMALIZE_MODES)
        if self.normalize == "per_group_mean_one":
            self.needs_groups = True

    def weights(self, scores: torch.Tensor, batch: RolloutBatch, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Weights ``(N,)`` or ``(N, L)`` (as the scores), zero outside ``mask``, normalised per ``normalize``."""
        check_score_shape("reweighter", self.name, self.granularity, scores)
        mask = self._entries(scores, batch, mask)
        raw = self._raw(scores.to(torch.float32), mask)  # a fresh tensor: normalised in place
        return normalize_weights_(raw.to(torch.float32), mask, self.normalize, batch.group_ids)

    @staticmethod
    def _entries(scores: torch.Tensor, batch: RolloutBatch, mask: torch.Tensor | None) -> torch.Tensor | None:
        """The mask the weights apply to, shaped like ``scores``; None when every response of ``(N,)`` scores counts."""
        want_dim = scores.dim()
        if mask is None:
            mask = batch.valid_mask if want_dim == 2 else torch.ones(batch.n, dtype=torch.bool, device=batch.device)
        elif want_dim == 2 and mask.dim() == 1:
            valid = batch.valid_mask
            assert valid is not None, "(N, L) scores come from a batch with a token axis"
            mask = mask.unsqueeze(1) & valid
        if want_dim == 1 and mask is not None and bool(mask.all()):
            mask = None  # every response counts: skip all masking work
        return mask

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:  # pragma: no cover - abstract
        """Raw weights shaped like ``scores``, as a new tensor (normalised in place); ``mask`` None: all entries."""
        raise NotImplementedError


@register("reweighter", "softmax")
class SoftmaxReweighter(Reweighter):
    """w_i proportional to exp(score_i / temperature).

    Args:
        temperature: softmax temperature T > 0, in the scorer's units: a score higher by T gets
            e times the weight; smaller T concentrates the weight on the top scores.
    """

    scope = "row"

    def __init__(self, temperature: float = 1.0, normalize: str = "mean_one") -> None:
        super().__init__(normalize)
        self.temperature = check_number("temperature", temperature, low=0.0, low_open=True, finite=True)

    def weights(self, scores: torch.Tensor, batch: RolloutBatch, mask: torch.Tensor | None = None) -> torch.Tensor:
        """As `Reweighter.weights`; all responses at mean 1: softmax times N (a softmax already sums to 1)."""
        if scores.dim() == 1 and self.normalize == "mean_one" and scores.numel() and (mask is None or bool(mask.all())):
            check_score_shape("reweighter", self.name, self.granularity, scores)
            return torch.softmax(scores.to(torch.float32) / self.temperature, dim=0).mul_(scores.shape[0])
        return super().weights(scores, batch, mask)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        # exp(logit - max): the same raw weights with or without a mask (normalize='none' returns them as they are).
        logits = scores / self.temperature
        if mask is not None:
            logits.masked_fill_(~mask, float("-inf"))
        if logits.numel() == 0:
            return logits
        # An all-masked set has max -inf; clamping keeps exp() at 0 there instead of NaN.
        return logits.sub_(logits.max().clamp_min(-1e30)).exp_()


@register("reweighter", "difficulty_band")
class DifficultyBandReweighter(Reweighter):
    """focus_weight inside the [low_q, high_q] quantile band of the scores, 1 outside.

    Args:
        low_q: lower quantile of the band, in [0, 1], of the scores the weights apply to (linear
            interpolation, as ``torch.quantile``); at most ``high_q``.
        high_q: upper quantile of the band, in [0, 1].
        focus_weight: raw weight (>= 0) of the entries inside the band (both ends included); the
            others get 1, before normalisation.
    """

    scope = "batch"

    def __init__(
        self, low_q: float = 0.25, high_q: float = 0.75, focus_weight: float = 2.0, normalize: str = "mean_one"
    ) -> None:
        super().__init__(normalize)
        self.low_q = check_number("low_q", low_q, low=0.0, high=1.0)
        self.high_q = check_number("high_q", high_q, low=0.0, high=1.0)
        if self.low_q > self.high_q:
            raise ParamError(f"parameter 'low_q' ({self.low_q}) must not exceed 'high_q' ({self.high_q})", "low_q")
        self.focus_weight = check_number("focus_weight", focus_weight, low=0.0, finite=True)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        inside_values = scores if mask is None else scores[mask]
        if inside_values.numel() == 0:
            return torch.zeros_like(scores)
        low, high = linear_quantiles(inside_values, (self.low_q, self.high_q))
        in_band = (scores >= low) & (scores <= high)
        return torch.where(in_band, self.focus_weight, 1.0).to(scores.dtype)


def linear_quantiles(values: torch.Tensor, qs: tuple[float, ...]) -> list[torch.Tensor]:
    """``torch.quantile(values, qs)`` (linear interpolation) for float32 ``values (n,)``, bit for bit,
    without a full sort.

    Each quantile is a lerp between two order statistics found with ``kthvalue`` (linear time);
    the rank and the lerp weight are computed in float32 as torch.quantile computes them.
    NaN input goes to torch.quantile itself (its NaN rule).
    """
    if bool(torch.isnan(values).any()):
        found = torch.quantile(values, torch.tensor(qs, dtype=values.dtype, device=values.device))
        return list(found.unbind())
    ranks = torch.tensor(qs, dtype=values.dtype) * (values.numel() - 1)
    below, above = ranks.floor().long().tolist(), ranks.ceil().long().tolist()
    weights = ranks - ranks.floor()
    out = []
    for rank_below, rank_above, weight in zip(below, above, weights, strict=True):
        low = torch.kthvalue(values, rank_below + 1).values
        high = low if rank_above == rank_below else torch.kthvalue(values, rank_above + 1).values
        out.append(torch.lerp(low, high, weight.to(values.device)))
    return out


@register("reweighter", "reward_range")
class RewardRangeReweighter(Reweighter):
    """`inside` weight when low <= score <= high, `outside` weight otherwise.

    The announcement's "weight samples whose rewards fall within specific ranges".

    Args:
        low: lower end of the range, in the scorer's units (e.g. a reward), included; at most ``high``.
            ``-inf`` means unbounded below.
        high: upper end of the range, included; ``inf`` means unbounded above.
        inside: raw weight (>= 0) of a score inside the range, before normalisation.
        outside: raw weight (>= 0) of a score outside the range, before normalisation.
    """

    scope = "row"

    def __init__(
        self,
        low: float = 0.2,
        high: float = 0.8,
        inside: float = 2.0,
        outside: float = 1.0,
        normalize: str = "mean_one",
    ) -> None:
        super().__init__(normalize)
        self.low = check_bound("low", low, upper=False)
        self.high = check_bound("high", high, upper=True)
        if self.low > self.high:
            raise ParamError(f"parameter 'low' ({self.low}) must not exceed 'high' ({self.high})", "low")
        self.inside = check_number("inside", inside, low=0.0, finite=True)
        self.outside = check_number("outside", outside, low=0.0, finite=True)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        in_range = (scores >= self.low) & (scores <= self.high)
        return torch.where(in_range, torch.full_like(scores, self.inside), torch.full_like(scores, self.outside))


@register("reweighter", "advantage_reweight")
class AdvantageReweighter(Reweighter):
    """Token weight alpha*p_it + (1-alpha), p_it the token probability: damps low-probability tokens.

    Args:
        alpha: mixing weight in [0, 1] of the token probability (from the ``token_prob`` scorer):
            0 gives every token weight 1, 1 weights each token by its probability (Advantage
            Reweighting, arXiv 2505.12929; DataFlex-RL's default is 0.5).
    """

    scope = "row"
    granularity = "token"

    def __init__(self, alpha: float = 0.3, normalize: str = "mean_one") -> None:
        super().__init__(normalize)
        self.alpha = check_number("alpha", alpha, low=0.0, high=1.0)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return (scores * self.alpha).add_(1.0 - self.alpha)

    def weights(self, scores: torch.Tensor, batch: RolloutBatch, mask: torch.Tensor | None = None) -> torch.Tensor:
        """As `Reweighter.weights`; on CPU one blocked pass makes, masks and sums the raw weights."""
        check_score_shape("reweighter", self.name, self.granularity, scores)
        mask = self._entries(scores, batch, mask)
        blocked = (
            scores.device.type == "cpu"
            and scores.numel() > 0
            and mask is not None
            and mask.dtype == torch.bool
            and mask.shape == scores.shape
            and mask.device.type == "cpu"
        )
        if not blocked or mask is None:  # (blocked implies a mask; the test narrows it for the type checker)
            return super().weights(scores, batch, mask)
        raw, total = self._masked_raw_blocked(scores.to(torch.float32), mask)
        if not math.isfinite(total):  # an inf or NaN probability: 0 * inf outside the mask would be NaN
            return super().weights(scores, batch, mask)
        if self.normalize != "mean_one":
            return normalize_weights_(raw, mask, self.normalize, batch.group_ids)
        count = true_count(mask)
        if count == 0 or total < 0:
            return raw  # total < 0: negative raw weights, left for Strategy's check to refuse
        if total == 0:
            return raw.copy_(mask)
        return raw.mul_(count / total)

    def _masked_raw_blocked(self, probs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Raw weights of ``probs (N, L)`` zeroed outside ``mask (N, L)`` bool, and their sum.

        Row blocks small enough to stay in cache: the ``(N, L)`` array is written once and no
        ``(N, L)`` temporary is made. The mask multiplies as 0/1 floats: bool-mask kernels
        (``where``, ``masked_fill_``) are unvectorised on CPU and 20x slower.
        """
        n, length = probs.shape
        out = torch.empty(n, length, dtype=torch.float32)
        blocks = row_block_bounds(n, length)
        mask_buffer = torch.empty(min(n, blocks[0][1]), length, dtype=torch.float32)
        sums = torch.empty(len(blocks), dtype=torch.float32)
        for i, (start, end) in enumerate(blocks):
            part, part_mask = out[start:end], mask_buffer[: end - start]
            part_mask.copy_(mask[start:end].view(torch.uint8))
            torch.mul(probs[start:end], self.alpha, out=part)
            part.add_(1.0 - self.alpha).mul_(part_mask)
            sums[i] = part.sum()
        return out, float(sums.sum(dtype=torch.float64))


@register("reweighter", "staleness_discount")
class StalenessDiscountReweighter(Reweighter):
    """w_i = gamma ** s_i, s_i the response's staleness (score: ``staleness``): older responses count less.

    An off-policy response's importance ratio drifts further from 1 the older its policy, so its
    gradient is noisier; a geometric discount keeps it in the batch at a smaller weight instead of
    dropping it (a truncation at ``max_staleness`` is the host's own rule). With the default
    ``mean_one`` normalisation only the relative emphasis changes: a batch of equally stale
    responses keeps weight 1 each.

    Args:
        gamma: discount per version of staleness, in (0, 1]: 1 weighs every response alike, 0.5
            halves a response's weight for each version it lags the trainer by.
    """

    scope = "row"

    def __init__(self, gamma: float = 0.5, normalize: str = "mean_one") -> None:
        super().__init__(normalize)
        self.gamma = check_number("gamma", gamma, low=0.0, high=1.0, low_open=True)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return torch.pow(torch.full_like(scores, self.gamma), scores.clamp_min(0.0))


PER_EPSILON = 1e-8  # added to |score| before the power, as DataFlex-RL does: |A| = 0 keeps a small weight


@register("reweighter", "per_advantage")
class PERAdvantageReweighter(Reweighter):
    """w_i = (|score_i| + 1e-8)^alpha, prioritized-replay style (score: advantage magnitude).

    The 1e-8 (DataFlex-RL's) gives a zero-advantage response a small non-zero priority, as
    prioritized replay's epsilon does (about 1.5e-4 of the mean weight at alpha 0.5).

    Args:
        alpha: priority exponent >= 0: 0 gives uniform weights, 1 weights proportional to
            |score| (prioritized replay, arXiv 1511.05952; DataFlex-RL's default is 0.5).
    """

    scope = "row"

    def __init__(self, alpha: float = 0.6, normalize: str = "mean_one") -> None:
        super().__init__(normalize)
        self.alpha = check_number("alpha", alpha, low=0.0, finite=True)

    def _raw(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return (scores.abs() + PER_EPSILON).pow_(self.alpha)
