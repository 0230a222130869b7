"""Scorers: turn the signals of a `RolloutBatch` into one score per response ``(N,)`` or token ``(N, L)``.

Pure tensor functions do the math (the per-row reductions the domain tracker shares,
`group_solve_rate`, `group_reward_variance` and `advantage_magnitude`, live in `rollout/groups.py`);
the registered classes declare what they need (``requires``, ``granularity``, ``needs_groups``) so a
strategy can check a host once, at build time.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

import torch

from dataflex_callbacks.config.params import check_choice, check_number
from dataflex_callbacks.errors import (
    SELECTION_REWARD_TEXT,
    BatchError,
    ComponentError,
    ParamError,
    RewardScaleWarning,
    user_stacklevel,
)
from dataflex_callbacks.registry import Component, register, register_base
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.rollout.groups import advantage_magnitude, group_reward_variance, group_solve_rate

REDUCE_MODES = ("mean", "sum", "max")
_T = TypeVar("_T")

# ---------------------------------------------------------------- pure functions


def rewards_are_binary(rewards: torch.Tensor) -> bool:
    """Whether every reward ``(N,)`` is exactly 0 or 1."""
    return bool(((rewards == 0) | (rewards == 1)).all())


def check_finite_scores(scores: torch.Tensor, valid_mask: torch.Tensor | None, scorer: str) -> None:
    """Raise a `ComponentError` naming ``scorer`` if a score it returned is NaN or infinite.

    Args:
        scores: ``(N,)``, or ``(N, L)`` token scores, of which only the entries at ``valid_mask``
            count (padding is never read).
        valid_mask: ``(N, L)`` bool, or None.
        scorer: how the message names the scorer (``"select: scorer 'reward'"``).

    One sum decides the common case, as for the batch's signals: no ``(N, L)`` temporary unless a
    value is not finite (or the sum overflows, or padding holds one).
    """
    if scores.numel() == 0 or not scores.is_floating_point():
        return
    total = scores.sum(dtype=torch.float32) if scores.element_size() < 4 else scores.sum()
    if bool(torch.isfinite(total)):
        return
    bad = ~torch.isfinite(scores)
    if scores.dim() == 2 and valid_mask is not None:
        bad &= valid_mask.to(bad.device)
    n_bad = int(bad.sum())
    if not n_bad:  # the sum overflowed, or only padding is not finite
        return
    first = tuple(int(i) for i in torch.nonzero(bad)[0])
    n_nan = int((torch.isnan(scores) & bad).sum())
    token_level = scores.dim() == 2
    counted = int(valid_mask.sum()) if token_level and valid_mask is not None else scores.numel()
    at = first if token_level else first[0]
    raise ComponentError(
        f"{scorer} returned {n_nan} NaN and {n_bad - n_nan} infinite of {counted} "
        f"{'token' if token_level else 'response'} scores (first: {float(scores[first]):g} at {at}); a selector or "
        "reweighter cannot rank or weigh "
        "them, so the step stops here. nan_policy cleans the batch's signals before any scorer runs, so these come "
        "from the scorer's own computation (a division by 0, the log of 0, ...): make it return finite scores; "
        "dataflex_callbacks.testing.check_component shows the failing input"
    )


# ---------------------------------------------------------------- registered scorers


@register_base("scorer")
class Scorer(Component):
    """Base class of scorers: subclass it, declare what the score reads, and implement ``_score``.

    A strategy calls ``score(batch)``, which checks ``requires`` and calls ``_score``. A subclass
    implements ``_score(self, batch: RolloutBatch) -> torch.Tensor``, returning a new float tensor
    on ``batch.device`` (a response-level scorer pairs with response-level selectors and
    reweighters, a token-level one with token-level ones):

    * ``granularity = "response"``: one score per response, ``(N,)``;
    * ``granularity = "token"``: one score per token, ``(N, L)``; only the entries at
      ``batch.valid_mask`` are read.

    It declares, as class attributes (checked once, when a strategy is built):

    * ``requires``: the `RolloutBatch` fields it reads (``score`` raises a `BatchError` naming a
      missing one); a scorer reading ``logprobs`` or ``entropies`` is run inside the loss, on the
      current policy's values, when the host defers it.
    * ``needs_groups``: True if it reads ``group_ids``.
    * ``scope``: what one row's score may depend on: ``"row"`` (its own signals), ``"group"``
      (its prompt group's rows, e.g. a solve rate) or ``"batch"`` (the whole batch, e.g. a
      batch z-score). `dataflex_callbacks.testing.check_component` checks a row or group scope
      against a loop that scores one group at a time.

    The batch it gets has been cleaned by the strategy's ``nan_policy``: NaN and infinite
    entries of ``rewards``, ``advantages``, ``logprobs`` and ``entropies`` are 0 (with ``drop``
    their rows are left out of the loss afterwards); ``-inf`` log-probs (impossible tokens) stay.
    Its scores must then be finite (at valid tokens, for token scores). Constructor parameters
    are the config's ``params``; a stateless scorer needs nothing else. One that keeps state
    across steps defines ``state_dict() -> dict`` (a copy, leaving the scorer unchanged) and
    ``load_state_dict(state)`` (after which a fresh instance scores exactly as the saved one did).
    """

    name = "scorer"
    requires: tuple[str, ...] = ("rewards",)
    granularity = "response"
    needs_groups = False
    scope = "group"

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
        """Scores of a batch whose required fields are present: ``(N,)`` or ``(N, L)`` float."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@register("scorer", "reward", aliases=("reward_difficulty",))
class RewardScorer(Scorer):
    """The response's own outcome reward r_i."""

    scope = "row"

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        return batch.rewards.to(torch.float32)


def _one_of(name: str, value: _T | None, alias: str, alias_value: _T | None) -> _T | None:
    """The value of a parameter given under its name or its alias (None if neither); both is an error."""
    if value is not None and alias_value is not None:
        raise ParamError(f"parameter {name!r} was given twice, also as its alias {alias!r}; keep one of them", name)
    return alias_value if value is None else value


@register("scorer", "group_solve_rate")
class GroupSolveRateScorer(Scorer):
    """Share of the group's responses whose reward exceeds ``threshold`` (default 0.5).

    ``success_threshold`` (DataFlex-RL's name) is an alias of ``threshold``. Meant for 0/1
    (verifier) rewards: on other rewards with the default threshold it warns once, since a
    solve-rate band then tends to drop every group.

    Args:
        threshold: reward level, in the reward's own units, above which a response counts as
            solved (strictly greater); None means 0.5, the midpoint of 0/1 verifier rewards, and
            warns once if the rewards are not all 0 or 1.
        success_threshold: DataFlex-RL's name for ``threshold``; give one of the two, not both.
    """

    scope = "group"
    requires = ("rewards", "group_ids")
    needs_groups = True

    def __init__(self, threshold: float | None = None, success_threshold: float | None = None) -> None:
        given = "success_threshold" if success_threshold is not None else "threshold"
        threshold = _one_of("threshold", threshold, "success_threshold", success_threshold)
        self.explicit_threshold = threshold is not None
        self.threshold = check_number(given, 0.5 if threshold is None else threshold, finite=True)
        self._warned = False

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        if not self.explicit_threshold and not self._warned and not rewards_are_binary(batch.rewards):
            self._warned = True
            warnings.warn(
                RewardScaleWarning(non_binary_solve_rate_message(batch.rewards, self.threshold)),
                stacklevel=user_stacklevel(),
            )
        assert batch.group_ids is not None  # in `requires`, checked by `score`
        return group_solve_rate(batch.rewards, batch.group_ids, self.threshold)


def non_binary_solve_rate_message(rewards: torch.Tensor, threshold: float) -> str:
    """The one-time warning of `GroupSolveRateScorer` on rewards that are not all 0 or 1."""
    finite = rewards[torch.isfinite(rewards)].float()
    seen = f"{finite.min().item():.4g} to {finite.max().item():.4g}" if finite.numel() else "no finite value"
    return (
        f"dataflex: scorer 'group_solve_rate' got rewards that are not all 0 or 1 ({seen}); it counts a response as "
        f"solved when its reward is above {threshold:g}, so a solve-rate band (difffilter, DataFlex-RL's diffband) "
        "can drop "
        "every group and train nothing. Fix: set the scorer's success_threshold= (alias threshold=) to this "
        f"reward's 'solved' level, choose a 0/1 reward as {SELECTION_REWARD_TEXT}, or judge 'all "
        "rewards equal' on the spread: scorer group_reward_variance with selector threshold_band(low=0, "
        "high=inf). This warning is shown once."
    )


@register("scorer", "group_reward_variance")
class GroupRewardVarianceScorer(Scorer):
    """Population variance of rewards inside the response's group (exactly 0 when they are all equal).

    With ``threshold_band(low=0, high=inf)`` it keeps exactly the groups whose rewards differ, on
    any reward scale (DAPO's dynamic sampling rule).
    """

    scope = "group"
    requires = ("rewards", "group_ids")
    needs_groups = True

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        assert batch.group_ids is not None  # in `requires`, checked by `score`
        return group_reward_variance(batch.rewards, batch.group_ids)


@register("scorer", "advantage_magnitude")
class AdvantageMagnitudeScorer(Scorer):
    """Mean (or sum, max) over valid tokens of |advantage|; ``agg`` (DataFlex-RL's name) is an alias of ``reduce``.

    Args:
        reduce: how a response's per-token |A_it| become one score: ``mean`` (a response without
            valid tokens scores 0), ``sum`` or ``max``; None means ``mean``.
        agg: DataFlex-RL's name for ``reduce``; give one of the two, not both.
    """

    scope = "row"
    requires = ("advantages",)

    def __init__(self, reduce: str | None = None, agg: str | None = None) -> None:
        given = "agg" if agg is not None else "reduce"
        reduce = _one_of("reduce", reduce, "agg", agg)
        self.reduce = check_choice(given, "mean" if reduce is None else reduce, REDUCE_MODES)

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        assert batch.advantages is not None  # in `requires`, checked by `score`
        return advantage_magnitude(batch.advantages, batch.valid_mask, self.reduce)


@register("scorer", "token_prob")
class TokenProbScorer(Scorer):
    """Per-token probability exp(logp_it) of the sampled token (token level)."""

    scope = "row"
    requires = ("logprobs",)
    granularity = "token"

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        assert batch.logprobs is not None  # in `requires`, checked by `score`
        return batch.logprobs.to(torch.float32).exp()


@register("scorer", "token_entropy")
class TokenEntropyScorer(Scorer):
    """Per-token policy entropy, as provided by the host (token level)."""

    scope = "row"
    requires = ("entropies",)
    granularity = "token"

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        assert batch.entropies is not None  # in `requires`, checked by `score`
        return batch.entropies.to(torch.float32)


@register("scorer", "response_length")
class ResponseLengthScorer(Scorer):
    """Number of valid completion tokens L_i."""

    scope = "row"
    requires = ("completion_mask",)

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        return batch.lengths


@register("scorer", "reward_efficiency")
class RewardEfficiencyScorer(Scorer):
    """Reward per token, r_i / max(L_i, 1)."""

    scope = "row"
    requires = ("rewards", "completion_mask")

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        return batch.rewards.to(torch.float32) / batch.lengths.clamp_min(1)


def staleness(policy_versions: torch.Tensor, trainer_version: int) -> torch.Tensor:
    """Policy versions each response lags the trainer by, ``trainer_version - policy_versions``: ``(N,)`` float32."""
    return (trainer_version - policy_versions.to(torch.int64)).to(torch.float32)


@register("scorer", "staleness")
class StalenessScorer(Scorer):
    """How many policy versions old the response is when consumed: ``trainer_version - policy_versions``.

    Only an asynchronous host (TRL's ``AsyncGRPOTrainer``) knows each response's policy version;
    a strategy naming this scorer is refused at build time by a host that does not provide
    ``policy_versions``. Pair it with ``staleness_discount`` (weight ``gamma ** staleness``) or a
    ``threshold`` selector (``high=k``: a staleness limit tighter than the host's).
    """

    scope = "row"
    requires = ("policy_versions",)

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        # In `requires`, checked by `score`; a batch with policy_versions has a trainer_version.
        assert batch.policy_versions is not None and batch.trainer_version is not None
        return staleness(batch.policy_versions, batch.trainer_version)
