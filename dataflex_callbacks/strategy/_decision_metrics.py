"""The metrics of one decision (`decision_metrics`) and the one check every decision's weights pass.

Functions of the `Strategy` (`strategy.py`), kept apart so the strategy module reads as its decisions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NoReturn

import torch

from dataflex_callbacks.errors import BatchError, ComponentError
from dataflex_callbacks.rollout.batch import RolloutBatch, masked_centered_square_sum, true_count
from dataflex_callbacks.strategy.parts import Part


def token_mask(batch: RolloutBatch, keep: torch.Tensor, token_keep: torch.Tensor | None) -> torch.Tensor:
    """``(N, L)`` tokens the weights are normalised over while deciding: ``token_keep`` (already valid
    and kept), else the valid tokens of kept responses. Hosts read a finished decision's kept tokens
    with `dataflex_callbacks.host.kept_token_mask` (which cannot be imported here: it builds strategies)."""
    if token_keep is not None:
        return token_keep
    if batch.valid_mask is None:
        raise BatchError("token-level parts need RolloutBatch.completion_mask (or another (N, L) field)")
    if bool(keep.all()):
        return batch.valid_mask  # read-only here: no (N, L) copy when every response stays
    return batch.valid_mask & keep.unsqueeze(1)


def refuse_weights(
    weights: torch.Tensor, reweight: Part | None, strategy: str, scores: torch.Tensor | None
) -> NoReturn:
    """Raise the `ComponentError` for weights ``(N,)`` or ``(N, L)`` holding a negative or non-finite value
    (failure path only)."""
    flat = weights.detach().reshape(-1)
    bad = ~torch.isfinite(flat) | (flat < 0)
    first = int(torch.nonzero(bad)[0])
    at = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), tuple(weights.shape)))
    found = (
        f"weight {float(flat[first]):.6g} at {at[0] if len(at) == 1 else at} "
        f"({int(bad.sum())} of {flat.numel()} negative or not finite)"
    )
    if reweight is None:
        raise ComponentError(f"strategy {strategy!r} produced {found}; weights must be finite and >= 0")
    reweighter, scorer = reweight.actuator.name, reweight.scorer.name
    if scores is not None and not bool(torch.isfinite(scores).all()):
        raise ComponentError(
            f"scorer {scorer!r} returned NaN or infinite scores, which reweighter {reweighter!r} "
            f"turned into {found}; a scorer must return finite scores (nan_policy cleans the "
            "batch's signals before scoring, so these come from the scorer itself)"
        )
    raise ComponentError(
        f"reweighter {reweighter!r} (on scorer {scorer!r}) returned {found}; loss weights must be "
        "finite and >= 0: make its raw weights >= 0 (e.g. exp(score), or score - score.min()); "
        "dataflex_callbacks.testing.check_component shows the failing input"
    )


def weight_metrics(
    keep: torch.Tensor,
    token_keep: torch.Tensor | None,
    weights: torch.Tensor,
    batch: RolloutBatch,
    reweight: Part | None,
    strategy: str,
    reweight_scores: torch.Tensor | None = None,
) -> dict[str, float]:
    """Weight statistics for the metrics; refuses (`ComponentError`) negative or non-finite weights.

    This is the one place every decision's weights pass, so the check of any reweighter's output
    (built-in or a user's) lives here: the minimum comes from the same pass as the maximum the
    metrics need, and the three sums are read with one device sync. ``reweight_scores`` (the
    reweighter's input, or None) only serves the error message.
    """
    # Weights are 0 outside their mask, so plain sums over all entries are sums over the kept
    # ones: no gather of the kept entries, no (N, L) temporary.
    mask = token_mask(batch, keep, token_keep) if weights.dim() == 2 else keep
    n = true_count(mask)
    if n == 0:
        return {"weight_mean": 0.0, "weight_std": 0.0, "weight_max": 0.0, "ess": 0.0}
    values = weights if weights.dim() == 2 else weights.to(torch.float64)
    total, minimum, maximum = torch.stack((values.sum(), *torch.aminmax(values))).tolist()
    if not (minimum >= 0 and maximum < math.inf):  # NaN fails both comparisons
        refuse_weights(weights, reweight, strategy, reweight_scores)
    mean = total / n
    if weights.dim() == 2:
        spread = masked_centered_square_sum(weights, mask, mean)
    else:
        spread = float(((values - mean) * keep).square().sum())
    square = spread + n * mean * mean  # sum of squared weights over the mask
    std = (spread / n) ** 0.5
    ess = total * total / (n * square) if square > 0 else 0.0
    return {"weight_mean": mean, "weight_std": std, "weight_max": maximum, "ess": ess}


def kept_metrics(batch: RolloutBatch, keep: torch.Tensor, token_keep: torch.Tensor | None) -> dict[str, float]:
    """``kept_frac`` and ``dropped_all`` of ``keep`` ``(N,)``,
    with ``kept_token_frac`` of ``token_keep`` ``(N, L)``.

    A step keeps nothing (``dropped_all`` 1) when no response stays, or no token of the kept ones.
    """
    n = batch.n
    kept = int(keep.sum()) if n else 0
    metrics = {"kept_frac": kept / n if n else 0.0, "dropped_all": float(n > 0 and kept == 0)}
    if token_keep is not None:
        n_valid = float(batch.lengths[keep].sum())
        n_tok = true_count(token_keep)
        metrics["kept_token_frac"] = n_tok / n_valid if n_valid else 0.0
        metrics["dropped_all"] = float(metrics["dropped_all"] or (n > 0 and n_tok == 0))
    return metrics


def decision_metrics(
    batch: RolloutBatch,
    keep: torch.Tensor,
    token_keep: torch.Tensor | None,
    weights: torch.Tensor,
    counts: Mapping[str, float],
    observed_rewards: torch.Tensor,
    reweight: Part | None,
    strategy: str,
    reweight_scores: torch.Tensor | None = None,
) -> dict[str, float]:
    """Every metric of one decision: kept fractions, the counts, weight statistics (refusing bad weights) and
    the mean selection reward per domain."""
    n = batch.n
    metrics = {**kept_metrics(batch, keep, token_keep), "nonfinite_rewards": 0.0}
    metrics.update(counts)
    metrics.update(weight_metrics(keep, token_keep, weights, batch, reweight, strategy, reweight_scores))
    if batch.domains is not None and n:
        labels, codes = batch.domain_codes()
        index = torch.from_numpy(codes)
        rewards = observed_rewards.detach().to("cpu", torch.float64)
        seen = torch.isfinite(rewards)  # rows left out under nan_policy='drop' are not observations
        sums = torch.zeros(len(labels), dtype=torch.float64).index_add_(0, index, rewards.where(seen, 0.0))
        rows = torch.zeros(len(labels), dtype=torch.float64).index_add_(0, index, seen.to(torch.float64))
        for label, total, count in zip(labels, sums.tolist(), rows.tolist(), strict=True):
            if count:
                metrics[f"selection_reward/{label}"] = total / count
    return metrics
