"""Selectors: scores -> keep mask, ``(N,)`` for responses or ``(N, L)`` for tokens.

A dropped response leaves the loss and its normaliser; the host adapters guarantee that.
Counts are ``round(fraction * size)`` with Python's rounding (half to even: 2.5 -> 2), as in
DataFlex-RL. Ties: ``topk_fraction`` and ``gfpo`` choose among equal scores exactly as
``torch.topk`` on the CPU does (DataFlex-RL's rule; computed on the CPU so the choice is the same
on every device); ``max_variance`` and ``entropy_top_tokens`` give ties to the earlier row/token.
"""

from __future__ import annotations

import torch

from dataflex_callbacks.components._score_shape import check_score_shape
from dataflex_callbacks.config.params import check_bool, check_bound, check_choice, check_int, check_number
from dataflex_callbacks.errors import BatchError, ParamError
from dataflex_callbacks.registry import Component, register, register_base
from dataflex_callbacks.rollout.batch import RolloutBatch, true_count
from dataflex_callbacks.rollout.groups import dense_groups, rank_within_groups, sort_within_groups


def round_count(fraction: float, size: int) -> int:
    """``round(fraction * size)`` half to even, clamped to ``[1, size]`` (``size`` >= 1)."""
    return max(1, min(size, round(fraction * size)))


# ---------------------------------------------------------------- pure functions


def threshold_band(scores: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Keep ``low < s < high`` (open interval; ``high`` may be ``inf``): ``(N,)`` bool."""
    return (scores > low) & (scores < high)


def topk_fraction(scores: torch.Tensor, fraction: float, largest: bool = True) -> torch.Tensor:
    """Keep the ``round(fraction * N)`` (at least 1) best scores ``(N,)``; ties as ``torch.topk`` on CPU."""
    n = scores.shape[0]
    keep = torch.zeros(n, dtype=torch.bool)
    if n:
        chosen = torch.topk(scores.detach().to("cpu", torch.float32), round_count(fraction, n), largest=largest).indices
        keep[chosen] = True
    return keep.to(scores.device)


def top_within_groups(metric: torch.Tensor, group_ids: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest ``metric (N,)`` values in every group (the whole group if it has <= k): ``(N,)``.

    Each group's members, in row order, go through ``torch.topk`` on the CPU, as DataFlex-RL's
    per-group loop does, so ties are broken the same way. Groups are batched by size: one
    ``topk`` call per distinct group size, not per group.
    """
    device = metric.device
    metric = metric.detach().to("cpu", torch.float32)
    index, count = dense_groups(group_ids.detach().cpu())
    n = metric.shape[0]
    keep = torch.ones(n, dtype=torch.bool)
    if n == 0:
        return keep.to(device)
    sizes = torch.bincount(index, minlength=count)
    contiguous = bool((index[1:] >= index[:-1]).all())
    members = torch.arange(n) if contiguous else torch.sort(index, stable=True).indices  # rows grouped, row order kept
    starts = torch.cumsum(sizes, 0) - sizes
    for size in torch.unique(sizes[sizes > k]).tolist():
        groups = torch.nonzero(sizes == size).flatten()
        rows = members[starts[groups].unsqueeze(1) + torch.arange(size)]  # (groups of this size, size)
        top = torch.topk(metric[rows], k, dim=1).indices
        keep[rows] = False
        keep[rows.gather(1, top)] = True
    return keep.to(device)


def max_variance_subset(scores: torch.Tensor, group_ids: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """Per group of size G, keep the ``n = round(f * G)`` responses whose scores have maximal variance.

    The optimum is the ``a`` lowest plus the ``n - a`` highest scores for some ``a`` (PODS,
    arXiv 2504.13818); every ``a`` is evaluated at once from per-group prefix sums of the sorted
    scores, and the smallest best ``a`` wins a tie. ``n`` rounds half to even (f=0.5, G=5: 2).
    """
    n_rows = scores.shape[0]
    if n_rows == 0:
        return torch.zeros(0, dtype=torch.bool, device=scores.device)
    values = scores.to(torch.float64)
    equal = _equal_contiguous_groups(group_ids)
    if equal is not None:
        return _max_variance_equal_groups(values, equal, keep_fraction)
    index, count = dense_groups(group_ids)
    order = sort_within_groups(values, index)
    rank = rank_within_groups(order, index, count)
    sizes = torch.bincount(index, minlength=count)
    width = int(sizes.max())
    # Each group's sorted scores as one row, summed from the group's own start (as a per-group
    # loop would), so equal candidate variances stay exactly equal and the tie rule holds.
    table = values.new_zeros(count, width)
    table[index, rank] = values
    zero = values.new_zeros(count, 1)
    prefix = torch.cat([zero, torch.cumsum(table, 1)], 1)
    prefix_sq = torch.cat([zero, torch.cumsum(table * table, 1)], 1)
    n_keep = torch.round(keep_fraction * sizes.to(torch.float64)).long().clamp(min=1)
    n_keep = torch.minimum(n_keep, sizes)

    a = torch.arange(int(n_keep.max()) + 1, device=scores.device).unsqueeze(0)  # a = 0 .. max n
    high_count = n_keep.unsqueeze(1) - a
    allowed = high_count >= 0
    ends = sizes.unsqueeze(1)
    high_begin = (ends - high_count).clamp(0, width)

    def kept_sum(table_prefix: torch.Tensor) -> torch.Tensor:
        low = table_prefix.gather(1, a.clamp(max=width).expand(count, -1))
        high = table_prefix.gather(1, ends) - table_prefix.gather(1, high_begin)
        return low + torch.where(high_count > 0, high, torch.zeros_like(high))

    size_kept = n_keep.unsqueeze(1).to(torch.float64)
    total, total_sq = kept_sum(prefix), kept_sum(prefix_sq)
    variance = total_sq / size_kept - (total / size_kept) ** 2
    variance = variance.masked_fill(~allowed, float("-inf"))
    best_a = torch.argmax(variance, dim=1)  # first maximum: the smallest a wins ties

    row_best = best_a[index]
    return (rank < row_best) | (rank >= sizes[index] - n_keep[index] + row_best)


def _equal_contiguous_groups(group_ids: torch.Tensor) -> int | None:
    """The common group size when ``group_ids (N,)`` are sorted runs all of one size (GRPO's layout), else None."""
    n = group_ids.shape[0]
    change = torch.nonzero(group_ids[1:] != group_ids[:-1]).flatten()
    size = int(change[0]) + 1 if change.numel() else n
    if n % size:
        return None
    # Runs of `size` rows each, every run's id different from its neighbour's and ids increasing.
    view = group_ids.view(n // size, size)
    if not bool((view == view[:, :1]).all()) or not bool((view[1:, 0] > view[:-1, 0]).all()):
        return None
    return size


def _max_variance_equal_groups(values: torch.Tensor, size: int, keep_fraction: float) -> torch.Tensor:
    """`max_variance_subset` for ``values (N,)`` float64 in contiguous groups of ``size``: one batched sort.

    The same sums in the same order as the general path (prefix sums of each group's sorted
    scores from its start), so the chosen subsets are identical.
    """
    groups = values.shape[0] // size
    n_keep = min(size, max(1, round(keep_fraction * size)))  # torch.round halves to even, as round() does
    if n_keep >= size:
        return torch.ones(values.shape[0], dtype=torch.bool, device=values.device)
    ordered, perm = torch.sort(values.view(groups, size), dim=1, stable=True)
    # Prefix sums of the sorted scores and their squares, together: (2, groups, size + 1).
    prefix = values.new_zeros(2, groups, size + 1)
    prefix[:, :, 1:] = torch.cumsum(torch.stack((ordered, ordered * ordered)), 2)
    # Candidate a (0 .. n_keep) keeps sorted positions [0, a) and [size - n_keep + a, size): plain slices.
    high = prefix[:, :, size:] - prefix[:, :, size - n_keep :]
    high[:, :, n_keep] = 0.0  # a = n_keep takes no high scores
    total, total_sq = prefix[:, :, : n_keep + 1] + high
    variance = total_sq / n_keep - (total / n_keep) ** 2
    best_a = torch.argmax(variance, dim=1)  # first maximum: the smallest a wins ties
    position = torch.arange(size, device=values.device)
    a = torch.arange(n_keep + 1, device=values.device).unsqueeze(1)
    patterns = (position < a) | (position >= size - n_keep + a)  # (n_keep + 1, size): kept sorted positions per a
    keep = torch.empty_like(perm, dtype=torch.bool)
    keep.scatter_(1, perm, patterns[best_a])
    return keep.flatten()


def top_tokens(scores: torch.Tensor, valid_mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Keep the top ``round(fraction * valid tokens)`` (at least 1) valid tokens by score ``(N, L)``: ``(N, L)`` bool.

    Finds the k-th largest valid score (linear time), keeps the valid tokens above it and, of
    the ties at it, the earliest in row-major order.
    """
    n_valid = int(true_count(valid_mask))
    if n_valid == 0:
        return torch.zeros_like(valid_mask, dtype=torch.bool)
    k = round_count(fraction, n_valid)
    scores = scores.to(torch.float32)
    valid_mask = valid_mask if valid_mask.dtype == torch.bool else valid_mask != 0
    found = _top_tokens_blocked(scores, valid_mask, k, n_valid)
    if found is not None:
        return found
    # GPU, small or non-finite input: one masked copy and an exact k-th value.
    masked = scores.masked_fill(~valid_mask, float("-inf"))
    threshold = kth_largest(masked, k)
    keep = masked > threshold
    room = k - int(true_count(keep))
    if room > 0:  # ties at the threshold: the earliest ones
        ties = (masked == threshold).view(-1)
        keep.view(-1)[torch.nonzero(ties).flatten()[:room]] = True
    return keep


def _top_tokens_blocked(scores: torch.Tensor, valid_mask: torch.Tensor, k: int, n_valid: int) -> torch.Tensor | None:
    """`top_tokens` on large CPU inputs in one pass of cache-sized row blocks, or None (use the dense path).

    Sampled rows bracket the k-th largest valid score in ``[low, high]``. The pass writes the
    valid tokens above ``high`` into the result and collects the few valid tokens inside the
    bracket with their positions; the exact k-th value and its ties are settled among those. No
    ``(N, L)`` masked copy is made: its fresh allocation alone costs more than the selection.
    """
    n_rows, length = scores.shape
    if (
        scores.device.type != "cpu"
        or scores.numel() < 1 << 18
        or not (scores.is_contiguous() and valid_mask.is_contiguous())
    ):
        return None
    if not bool(torch.isfinite(scores.sum())):  # NaN / inf: the dense path's ordering rules
        return None
    # Whole rows at fixed seeded positions (contiguous reads); the result never depends on them, only the speed.
    picks = torch.randint(n_rows, (max(1, n_rows // 16),), generator=torch.Generator().manual_seed(0))
    sample = scores[picks][valid_mask[picks]]
    size = sample.numel()
    if size < 256:
        return None
    expected = k * size / n_valid
    margin = 8.0 * expected**0.5 + 64.0
    high_rank, low_rank = int(expected - margin), min(size, int(expected + margin) + 1)
    high = float("inf") if high_rank < 1 else float(torch.kthvalue(sample, size - high_rank + 1).values)
    low = float(torch.kthvalue(sample, size - low_rank + 1).values)
    keep = torch.empty(n_rows, length, dtype=torch.bool)
    rows = max(1, (1 << 17) // max(length, 1))
    flags = torch.empty(min(rows, n_rows), length, dtype=torch.bool)
    above = 0
    position_parts: list[torch.Tensor] = []
    value_parts: list[torch.Tensor] = []
    for start in range(0, n_rows, rows):
        block, part, inside = (
            scores[start : start + rows],
            keep[start : start + rows],
            flags[: min(rows, n_rows - start)],
        )
        block_mask = valid_mask[start : start + rows]
        torch.gt(block, high, out=part)
        part &= block_mask
        above += int(part.view(torch.uint8).sum(dtype=torch.int64))
        torch.ge(block, low, out=inside)
        inside &= block_mask
        inside &= ~part
        where = torch.nonzero(inside.view(-1)).flatten()
        value_parts.append(block.reshape(-1)[where])
        position_parts.append(where + start * length)
    values, positions = torch.cat(value_parts), torch.cat(position_parts)
    need = k - above  # how many of the bracket's entries (largest first) are kept
    if need < 0 or need > values.numel():
        return None  # the sample's bracket missed the k-th value
    if need == 0:
        return keep
    threshold = torch.kthvalue(values, values.numel() - need + 1).values
    flat = keep.view(-1)
    flat[positions[values > threshold]] = True
    room = need - int((values > threshold).sum())
    flat[positions[values == threshold][:room]] = True  # positions ascend: the earliest ties
    return keep


def kth_largest(values: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest entry of ``values (N, L)`` float32 (``1 <= k <= numel``), exactly.

    On large CPU inputs a sample brackets the answer, so the exact selection runs only on
    the few entries inside the bracket (a full k-th value pass copies and partitions all of them);
    if the bracket misses, the full pass runs.
    """
    flat = values.reshape(-1)
    n = flat.numel()
    if flat.device.type != "cpu":
        # CUDA kthvalue on ~1e8 entries is ~100x slower than topk; both give the same value.
        return torch.topk(flat, k, sorted=False).values.min()
    if n < 1 << 18:
        return torch.kthvalue(flat, n - k + 1).values
    # A fixed random sample (seeded: the result never depends on it, only the speed); a strided one
    # would follow the padding pattern when L is a multiple of the stride.
    m = n // 32
    sample = flat[torch.randint(n, (m,), generator=torch.Generator().manual_seed(0))]
    expected = k * m / n
    margin = 6.0 * expected**0.5 + 32.0
    high_rank, low_rank = max(1, int(expected - margin)), min(m, int(expected + margin) + 1)
    high = torch.kthvalue(sample, m - high_rank + 1).values  # about high_rank sample entries are >= it
    low = torch.kthvalue(sample, m - low_rank + 1).values
    above = int(true_count(values > high))
    if above < k:
        candidates = flat[(flat >= low) & (flat <= high)]
        need = k - above  # the answer is the need-th largest entry of [low, high]
        if need <= candidates.numel():
            return torch.kthvalue(candidates, candidates.numel() - need + 1).values
    return torch.kthvalue(flat, n - k + 1).values


# ---------------------------------------------------------------- registered selectors


@register_base("selector")
class Selector(Component):
    """Base class of selectors: subclass it and implement ``_select`` (scores -> keep mask).

    A strategy calls ``select(scores, batch)``, which checks the scores' shape and ``requires``
    and calls ``_select(self, scores, batch) -> torch.Tensor``. A subclass implements ``_select``:

    * ``granularity = "response"``: ``scores`` is ``(N,)`` (one per response); return a ``(N,)``
      bool keep mask. A dropped response leaves the loss and its normaliser.
    * ``granularity = "token"``: ``scores`` is ``(N, L)``; return a ``(N, L)`` bool mask of the
      tokens that stay in the loss. Entries outside ``batch.valid_mask`` (and in rows already
      dropped) are cleared by the strategy, whatever the mask says there.

    The mask is a new tensor on ``scores.device``. Class attributes declare ``requires`` (the
    `RolloutBatch` fields ``_select`` reads, besides the scores), ``needs_groups`` (True if it
    reads ``group_ids``) and ``scope``: what one row's keep decision may depend on, ``"row"``
    (its own score), ``"group"`` (its group's scores, e.g. the k best of each group) or
    ``"batch"`` (every score, e.g. a top fraction of the batch). The scores are finite (the
    scorer's contract) and the batch's signals are cleaned as the scorer's docstring says.
    Constructor parameters are the config's ``params``; a selector that keeps state across
    steps defines ``state_dict()`` and ``load_state_dict(state)`` as `Scorer` says.
    """

    name = "selector"
    granularity = "response"
    needs_groups = False
    requires: tuple[str, ...] = ()
    scope = "group"

    def select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        check_score_shape("selector", self.name, self.granularity, scores)
        for field_name in self.requires:
            if not batch.has(field_name):
                raise BatchError(
                    f"selector {self.name!r} needs RolloutBatch.{field_name}, which this batch does not have"
                )
        return self._select(scores, batch)

    def _select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:  # pragma: no cover - abstract
        """Keep mask shaped like ``scores``: ``(N,)`` or ``(N, L)`` bool."""
        raise NotImplementedError


@register("selector", "threshold_band")
class ThresholdBandSelector(Selector):
    """Keep responses with low < score < high (DAPO dynamic sampling; online difficulty filtering).

    Args:
        low: lower bound, in the scorer's units, excluded (open interval); must be below ``high``;
            ``-inf`` means unbounded below. DAPO's dynamic sampling (arXiv 2503.14476) uses 0 on a
            group solve rate (drops all-wrong groups), online difficulty filtering (arXiv 2504.03380) 0.2.
        high: upper bound, excluded; ``inf`` means unbounded above (the ``diffband`` preset's, on
            ``group_reward_variance`` scores). DAPO uses 1 on a group solve rate (drops all-correct
            groups), online difficulty filtering 0.8.
    """

    scope = "row"

    def __init__(self, low: float = 0.0, high: float = 1.0) -> None:
        self.low = check_bound("low", low, upper=False)
        self.high = check_bound("high", high, upper=True)
        if self.low >= self.high:
            raise ParamError(f"parameter 'low' ({self.low}) must be below 'high' ({self.high})", "low")

    def _select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        return threshold_band(scores, self.low, self.high)


@register("selector", "topk_fraction")
class TopkFractionSelector(Selector):
    """Keep the round(fraction*N) highest (or lowest) scoring responses, at least one (ties as torch.topk on CPU).

    Args:
        fraction: share of the batch's N responses kept, in (0, 1]; the count is
            ``round(fraction * N)`` (half to even), at least 1.
        largest: True keeps the highest scores, False the lowest.
    """

    scope = "batch"

    def __init__(self, fraction: float = 0.5, largest: bool = True) -> None:
        self.fraction = check_number("fraction", fraction, low=0.0, high=1.0, low_open=True)
        self.largest = check_bool("largest", largest)

    def _select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        return topk_fraction(scores, self.fraction, self.largest)


@register("selector", "gfpo")
class GFPOSelector(Selector):
    """Keep the k shortest (metric=short) or most score-per-token (efficiency) responses per group (GFPO).

    ``efficiency`` divides the configured scorer's value (``reward``: r_i) by the response length;
    ``score`` ranks by the scorer's value itself. Groups of at most k responses are kept whole.

    Args:
        k: responses kept per group, an integer >= 1 (GFPO, arXiv 2508.09726, samples more
            responses per prompt and trains on k of them; DataFlex-RL's default is 8).
        metric: what ranks a group's responses: ``short`` (fewest valid tokens, -L_i),
            ``efficiency`` (score per token, s_i / max(L_i, 1); with the ``reward`` scorer
            GFPO's reward per token) or ``score`` (the scorer's value itself).
    """

    scope = "group"
    needs_groups = True
    requires: tuple[str, ...] = ("group_ids",)

    def __init__(self, k: int = 3, metric: str = "efficiency") -> None:
        self.k = check_int("k", k, low=1)
        self.metric = check_choice("metric", metric, ("short", "efficiency", "score"))
        if self.metric != "score":
            self.requires = ("group_ids", "completion_mask")

    def _select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        if self.metric == "short":
            metric = -batch.lengths
        elif self.metric == "efficiency":
            # The configured scorer's value per token (with the `reward` scorer: r_i / L_i).
            metric = scores.to(torch.float32) / batch.lengths.clamp_min(1)
        else:
            metric = scores
        assert batch.group_ids is not None  # in `requires`, checked by `select`
        return top_within_groups(metric, batch.group_ids, self.k)


@register("selector", "max_variance")
class MaxVarianceSelector(Selector):
    """Keep the round(f*G)-subset of each group with maximal score variance (PODS down-sampling; round half to even).

    Args:
        keep_fraction: share f of each group of G responses kept, in (0, 1]; the subset size is
            ``round(f * G)`` (half to even), at least 1 (PODS, arXiv 2504.13818).
    """

    scope = "group"
    needs_groups = True
    requires = ("group_ids",)

    def __init__(self, keep_fraction: float = 0.5) -> None:
        self.keep_fraction = check_number("keep_fraction", keep_fraction, low=0.0, high=1.0, low_open=True)

    def _select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        assert batch.group_ids is not None  # in `requires`, checked by `select`
        return max_variance_subset(scores, batch.group_ids, self.keep_fraction)


@register("selector", "entropy_top_tokens")
class EntropyTopTokensSelector(Selector):
    """Keep only the top fraction of highest-score (entropy) valid tokens in the loss (80/20 rule).

    Args:
        fraction: share of the batch's valid tokens that stay in the loss, in (0, 1]; the count
            is ``round(fraction * valid tokens)``, at least 1. "Beyond the 80/20 rule"
            (arXiv 2506.01939) keeps the top 0.2 by entropy.
    """

    scope = "batch"
    granularity = "token"
    requires = ("completion_mask",)

    def __init__(self, fraction: float = 0.2) -> None:
        self.fraction = check_number("fraction", fraction, low=0.0, high=1.0, low_open=True)

    def _select(self, scores: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
        assert batch.valid_mask is not None  # completion_mask is in `requires`, checked by `select`
        return top_tokens(scores, batch.valid_mask, self.fraction)
