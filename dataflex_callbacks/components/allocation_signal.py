"""Whether a group will carry signal: what a prompt's completions so far say (`GroupTally`), the `screen`
allocator's rules on a pilot (`screen_commits`, `band_commits`, `posterior_signal_probability`), its Beta moments;
and the prompts it skips before their pilot because their prior predicts none (`PriorSkips`).

A group of G completions carries signal (its rewards are not all equal) unless all pass or all fail. With the pass
rate ``p ~ Beta(a, b)``, that has probability ``1 - E[p^G] - E[(1 - p)^G]``, with ``E[p^m] = B(a + m, b) / B(a, b)``
(`beta_moment`). `posterior_signal_probability` asks it after a pilot, `prior_signal_probability` before any.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

from dataflex_callbacks.components.allocation_memory import restore_generator, saved_field, saved_numbers
from dataflex_callbacks.errors import check_state
from dataflex_callbacks.rollout.prompt_keys import hashable_key


def beta_moment(a: torch.Tensor, b: torch.Tensor, m: torch.Tensor | int) -> torch.Tensor:
    """``E[q^m]`` for ``q ~ Beta(a, b)``, elementwise: ``B(a + m, b) / B(a, b)``, computed with ``lgamma``."""
    return torch.exp(torch.lgamma(a + m) + torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(a + b + m))


class GroupTally(NamedTuple):
    """What the completions of each prompt so far say, one entry per prompt ``(P,)``.

    ``passes``: completions with reward above the threshold; ``trials``: completions generated;
    ``low`` / ``high``: the smallest and largest reward (a group carries signal when ``low < high``).
    """

    passes: torch.Tensor
    trials: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    @property
    def signal(self) -> torch.Tensor:
        """``(P,)`` bool: the prompt's completions so far are not all rewarded alike."""
        return self.low < self.high


def screen_commits(tally: GroupTally) -> torch.Tensor:
    """``(P,)`` bool, the ``intermediate`` rule: commit where the pilot's rewards are not all equal.

    With 0/1 rewards that is a pilot pass rate strictly between 0 and 1 (SPEED-RL's rule); the merged
    group then carries signal for certain, whatever the commit completions score.
    """
    return tally.signal


def band_commits(tally: GroupTally, lower: float, upper: float) -> torch.Tensor:
    """``(P,)`` bool, the ``band`` rule: commit where the pilot pass rate ``passes / trials`` is in ``[lower, upper]``.

    Pilot-Commit's difficulty targeting (its band: [0.125, 0.75]). A prompt without a completion never commits.
    """
    rate = tally.passes / tally.trials.clamp_min(1.0)
    return (tally.trials > 0) & (rate >= lower) & (rate <= upper)


def posterior_signal_probability(
    tally: GroupTally, prior_passes: torch.Tensor, prior_fails: torch.Tensor, group_size: int
) -> torch.Tensor:
    """``(P,)`` the probability that a prompt's full group of ``group_size`` carries signal, given its pilot.

    The pass rate ``p`` has the posterior ``Beta(prior_passes + passes, prior_fails + fails)``. A
    pilot with a pass and a fail already carries signal (1.0). An all-pass pilot gives signal unless
    the ``m = group_size - trials`` further completions all pass too: ``1 - E[p^m]``; an all-fail
    pilot, unless they all fail: ``1 - E[(1 - p)^m]`` (`beta_moment`).
    """
    fails = tally.trials - tally.passes
    a = prior_passes.to(tally.passes) + tally.passes
    b = prior_fails.to(tally.passes) + fails
    m = (group_size - tally.trials).clamp_min(0)
    all_pass, all_fail = tally.passes == tally.trials, tally.passes == 0
    probability = torch.ones_like(a)
    probability = torch.where(all_pass, 1.0 - beta_moment(a, b, m), probability)
    probability = torch.where(all_fail, 1.0 - beta_moment(b, a, m), probability)
    return torch.where(tally.signal, torch.ones_like(a), probability)


def prior_signal_probability(prior_passes: torch.Tensor, prior_fails: torch.Tensor, group_size: int) -> torch.Tensor:
    """``(P,)`` the probability that a full group of ``group_size`` carries signal before any of its completions.

    With ``p ~ Beta(prior_passes, prior_fails)`` (both ``(P,)``, > 0): ``1 - E[p^G] - E[(1 - p)^G]``, the chance that
    its G completions neither all pass nor all fail.
    """
    a, b = prior_passes.to(torch.float64), prior_fails.to(torch.float64)
    return (1.0 - beta_moment(a, b, group_size) - beta_moment(b, a, group_size)).clamp_min(0.0)


class PriorSkips:
    """The `screen` allocator's skips before a pilot: prompts whose prior predicts a group without signal.

    A prompt is predicted to give no signal when `prior_signal_probability` of its prior (its domain's Beta plus its
    own earlier pilots, `PassHistory.prior`) is below ``min_signal``, once its domain has a pilot. A share ``explore``
    of those is piloted anyway, drawn from a generator with a fixed seed, so each domain's estimate follows the policy
    and every rank (asked with the same keys in the same order) draws alike. A prompt let through keeps its pilot
    until it is piloted (`piloted`): a host that asks again before the pilot (`AllocationRounds.start` after the
    host's own drop) gets the same answer, not a second draw.

    Args:
        min_signal: skip below this probability that the full group carries signal, in [0, 1).
        explore: the share of predicted skips piloted anyway, in [0, 1].
    """

    SEED = 20260526
    """The generator's fixed seed: the draws of a run, resumed or not, are the same on every rank."""

    def __init__(self, min_signal: float, explore: float) -> None:
        self.min_signal, self.explore = min_signal, explore
        self.generator = torch.Generator().manual_seed(self.SEED)
        self.granted: dict[Hashable, None] = {}  # an ordered set: predicted skips drawn to pilot, not piloted yet
        self.skips = 0.0  # prompts skipped so far

    def decide(self, keys: Sequence[Any], probability: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        """``(P,)`` bool: skip where ``probability (P,)`` is below ``min_signal`` and ``known (P,)`` (the domain has a
        pilot), unless the explore draw (one per prompt) or an earlier one lets it through."""
        hashed = [hashable_key(k) for k in keys]
        draws = torch.rand(len(hashed), generator=self.generator, dtype=torch.float64)
        granted = torch.tensor([k in self.granted for k in hashed], dtype=torch.bool)
        predicted = (probability.cpu() < self.min_signal) & known.cpu() & ~granted
        skip = predicted & (draws >= self.explore)
        for i in torch.nonzero(predicted & ~skip).flatten().tolist():
            self.granted[hashed[i]] = None
        self.skips += float(skip.sum())
        return skip

    def piloted(self, keys: Sequence[Any]) -> None:
        """Forget the grants of ``keys``, piloted now: their next draw decides afresh."""
        for key in keys:
            self.granted.pop(hashable_key(key), None)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "granted": list(self.granted), "skips": self.skips}

    def load_state_dict(self, state: dict) -> None:
        check_state(state, ("generator", "granted", "skips"), "PriorSkips")
        restore_generator(self.generator, state, "PriorSkips")
        self.granted = dict.fromkeys(saved_field(state, "granted", list, "PriorSkips"))
        (self.skips,) = saved_numbers([state["skips"]], 1, "skips", "PriorSkips")
