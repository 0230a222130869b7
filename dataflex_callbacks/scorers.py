"""Scorers: turn the signals of a `RolloutBatch` into one score per response ``(N,)`` or token ``(N, L)``.

Pure tensor functions do the math; the registered classes declare what they need
(``requires``, ``granularity``, ``needs_groups``) so a strategy can check a host once, at build time.
"""

from __future__ import annotations

import torch

from .batch import RolloutBatch
from .errors import BatchError
from .groups import dense_groups, segment_mean, segment_variance
from .params import check_choice, check_number
from .registry import register

# ---------------------------------------------------------------- pure functions


def group_solve_rate(rewards: torch.Tensor, group_ids: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """Share of responses in each row's group with reward above ``threshold``: ``(N,)``."""
    index, count = dense_groups(group_ids)
    solved = (rewards > threshold).to(torch.float32)
    return segment_mean(solved, index, count)[index]


def group_reward_variance(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Population variance of rewards in each row's group: ``(N,)``."""
    index, count = dense_groups(group_ids)
    return segment_variance(rewards.to(torch.float32), index, count)[index]


def advantage_magnitude(advantages: torch.Tensor, valid_mask: torch.Tensor | None, reduce: str = "mean") -> torch.Tensor:
    """Mean, sum or max over valid tokens of ``|A_it|``: ``(N,)``; ``(N,)`` advantages count per token."""
    magnitude = advantages.to(torch.float32).abs()
    if magnitude.dim() == 1:
        if reduce == "sum" and valid_mask is not None:
            return magnitude * valid_mask.sum(dim=1, dtype=torch.float32)
        return magnitude
    mask = valid_mask if valid_mask is not None else torch.ones_like(magnitude, dtype=torch.bool)
    if reduce == "max":
        return magnitude.masked_fill(~mask, 0.0).amax(dim=1) if magnitude.shape[1] else magnitude.new_zeros(magnitude.shape[0])
    total = (magnitude * mask).sum(dim=1)
    if reduce == "sum":
        return total
    return total / mask.sum(dim=1).clamp_min(1)


def check_score_shape(kind: str, name: str, granularity: str, scores: torch.Tensor) -> None:
    """Raise `BatchError` unless ``scores`` is ``(N,)`` for response-level or ``(N, L)`` for token-level components."""
    want_dim = 2 if granularity == "token" else 1
    if scores.dim() != want_dim:
        shape = "(N, L)" if want_dim == 2 else "(N,)"
        raise BatchError(
            f"{kind} {name!r} works on {granularity}-level scores {shape}; got shape "
            f"{tuple(scores.shape)}: pair it with a {granularity}-level scorer"
        )


# ---------------------------------------------------------------- registered scorers


class Scorer:
    """Base class: ``score(batch) -> Tensor`` of shape ``(N,)`` or ``(N, L)``."""

    name = "scorer"
    requires: tuple[str, ...] = ("rewards",)
    granularity = "response"
    needs_groups = False

    def score(self, batch: RolloutBatch) -> torch.Tensor:
        self.check(batch)
        return self._score(batch)

    def check(self, batch: RolloutBatch) -> None:
        """Raise `BatchError` naming the first required field the batch lacks."""
        for field_name in self.requires:
            if not batch.has(field_name):
                raise BatchError(
                    f"scorer {self.name!r} needs RolloutBatch.{field_name}, which this batch does not have; "
                    f"pass {field_name}=... when building the RolloutBatch or choose another scorer"
                )

    def _score(self, batch: RolloutBatch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@register("scorer", "reward", aliases=("reward_difficulty",))
class RewardScorer(Scorer):
    """The response's own outcome reward r_i."""

    def _score(self, batch):
        return batch.rewards.to(torch.float32)


@register("scorer", "group_solve_rate")
class GroupSolveRateScorer(Scorer):
    """Share of the group's responses whose reward exceeds ``threshold`` (default 0.5)."""

    requires = ("rewards", "group_ids")
    needs_groups = True

    def __init__(self, threshold: float = 0.5):
        self.threshold = check_number("threshold", threshold)

    def _score(self, batch):
        return group_solve_rate(batch.rewards, batch.group_ids, self.threshold)


@register("scorer", "group_reward_variance")
class GroupRewardVarianceScorer(Scorer):
    """Population variance of rewards inside the response's group."""

    requires = ("rewards", "group_ids")
    needs_groups = True

    def _score(self, batch):
        return group_reward_variance(batch.rewards, batch.group_ids)


@register("scorer", "advantage_magnitude")
class AdvantageMagnitudeScorer(Scorer):
    """Mean (or sum, max) over valid tokens of |advantage|."""

    requires = ("advantages",)

    def __init__(self, reduce: str = "mean"):
        self.reduce = check_choice("reduce", reduce, ("mean", "sum", "max"))

    def _score(self, batch):
        return advantage_magnitude(batch.advantages, batch.valid_mask, self.reduce)


@register("scorer", "token_prob")
class TokenProbScorer(Scorer):
    """Per-token probability exp(logp_it) of the sampled token (token level)."""

    requires = ("logprobs",)
    granularity = "token"

    def _score(self, batch):
        return batch.logprobs.to(torch.float32).exp()


@register("scorer", "token_entropy")
class TokenEntropyScorer(Scorer):
    """Per-token policy entropy, as provided by the host (token level)."""

    requires = ("entropies",)
    granularity = "token"

    def _score(self, batch):
        return batch.entropies.to(torch.float32)


@register("scorer", "response_length")
class ResponseLengthScorer(Scorer):
    """Number of valid completion tokens L_i."""

    requires = ("completion_mask",)

    def _score(self, batch):
        return batch.lengths


@register("scorer", "reward_efficiency")
class RewardEfficiencyScorer(Scorer):
    """Reward per token, r_i / max(L_i, 1)."""

    requires = ("rewards", "completion_mask")

    def _score(self, batch):
        return batch.rewards.to(torch.float32) / batch.lengths.clamp_min(1)
