"""Pre-rollout selection: skip prompts predicted to give no learning signal, before generating.

A group whose rewards all agree (all correct or all wrong) has zero advantage in GRPO and
contributes no gradient, yet its generation was paid for. Prompts that gave such groups tend to
keep giving them (GRESO, "Act Only When It Pays", arXiv 2506.02177). `SkipZeroVariance` keeps a
`PromptHistory` and lets the sampler skip a prompt with no-signal streak ``z`` with
probability ``1 - max(min_keep, explore ** z)``:

- the longer the streak, the likelier the skip;
- ``explore`` adapts after every batch, in proportion to the miss, so the share of no-signal
  groups among generated groups tracks ``target_share`` (too many: explore less);
- ``min_keep`` is the floor chance of re-checking any prompt, so one that became learnable
  comes back.

Two additions to GRESO's rule, both on by default:

- ``domain_prior``: a prompt not seen yet is predicted from its domain. If a share ``q`` of the
  domain's recent groups gave no signal, the prompt is kept with ``1 - q * (1 - explore)`` (the
  keep probability of a prompt that has a streak of one with probability ``q``). Within one pass
  over a large dataset few prompts come back, so without it the rule has nothing to act on.
- ``noise_check``: a group in which identical completions got different rewards counts as giving
  no signal: a verifiable reward is a function of the answer, so its reward is noise there
  (needs ``RolloutBatch.completion_ids``, which the TRL adapter provides).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from .batch import RolloutBatch
from .history import PromptHistory
from .params import check_bool, check_number
from .registry import register


@register("pre_select", "skip_zero_variance")
class SkipZeroVariance:
    """Skip prompts whose recent groups all had zero reward variance (GRESO-style), adaptively.

    The rule and its two additions are described in this module's docstring (GRESO, arXiv
    2506.02177).

    Args:
        target_share: wanted share, in [0, 1], of no-signal groups (all rewards equal, or noisy)
            among the generated groups; ``explore`` adapts towards it.
        explore: starting base, in [0, 1], of the keep probability: a prompt with a no-signal
            streak z is kept with ``max(min_keep, explore ** z)``; it adapts after every batch.
        min_keep: floor keep probability, in (0, 1], of every prompt, so one that became
            learnable is re-checked (also the lowest value ``explore`` adapts to).
        adapt_rate: step, in [0, 1], by which ``explore`` moves per batch at the largest
            possible miss of ``target_share`` (proportionally less for smaller misses).
        domain_prior: predict a prompt never seen from its domain's recent no-signal share.
        prior_rate: moving-average rate, in (0, 1], of each domain's no-signal share (the weight
            of the newest batch).
        noise_check: count a group whose identical completions got different rewards as giving no
            signal (needs ``RolloutBatch.completion_ids``).
    """

    def __init__(self, target_share: float = 0.25, explore: float = 0.5, min_keep: float = 0.05,
                 adapt_rate: float = 0.02, domain_prior: bool = True, prior_rate: float = 0.2,
                 noise_check: bool = True):
        self.target_share = check_number("target_share", target_share, low=0.0, high=1.0)
        self.explore = check_number("explore", explore, low=0.0, high=1.0)
        self.min_keep = check_number("min_keep", min_keep, low=0.0, high=1.0, low_open=True)
        self.adapt_rate = check_number("adapt_rate", adapt_rate, low=0.0, high=1.0)
        self.domain_prior = check_bool("domain_prior", domain_prior)
        self.noise_check = check_bool("noise_check", noise_check)
        self.history = PromptHistory(prior_rate=check_number("prior_rate", prior_rate, low=0.0, high=1.0,
                                                             low_open=True))
        self.skipped = 0
        self.drawn = 0
        self.rechecked = 0
        self.last_zero_share = float("nan")
        self.last_noisy_share = float("nan")
        self.num_generations = 1  # set by the sampler: completions a skipped prompt would have cost

    requires = ("rewards", "group_ids", "prompt_keys")

    def keep_probability(self, keys: Sequence[Hashable], labels: Sequence[str] | None = None) -> np.ndarray:
        """Probability that each candidate prompt is generated now.

        A prompt seen before: ``max(min_keep, explore ** streak)`` (1 with no streak). One never seen,
        with its domain in ``labels`` and ``domain_prior`` on: ``max(min_keep, 1 - q * (1 - explore))``,
        ``q`` its domain's recent no-signal share; otherwise 1.
        """
        slots = self.history.lookup(keys)
        seen = slots >= 0
        streak = self.history.streaks_at(slots).astype(np.float64)
        keep = np.where(streak > 0, np.maximum(self.min_keep, self.explore ** streak), 1.0)
        if self.domain_prior and labels is not None and not seen.all():
            unseen = ~seen
            share = self.history.prior([labels[i] for i in np.flatnonzero(unseen)])
            predicted = np.maximum(self.min_keep, 1.0 - np.nan_to_num(share, nan=0.0) * (1.0 - self.explore))
            keep[unseen] = predicted
        return keep

    def record_draws(self, accepted: Sequence[Hashable], skipped: int) -> None:
        """Sampler bookkeeping: prompts it generated and how many candidates it skipped."""
        self.drawn += len(accepted)
        self.skipped += int(skipped)
        self.rechecked += int((self.history.streaks(accepted) > 0).sum())

    def observe(self, batch: RolloutBatch, step: int, sync: bool = False) -> dict[str, float]:
        """Record the batch's group outcomes and adapt ``explore`` towards the target share."""
        stats = self.history.update(batch, step, sync=sync, noise_check=self.noise_check)
        if stats["groups"]:
            self.last_zero_share = stats["zero_variance_share"]
            self.last_noisy_share = stats["noisy_share"]
            # Proportional: the step is adapt_rate at the largest possible miss, so the mean share settles on the target.
            miss = (self.target_share - stats["no_signal_share"]) / max(self.target_share, 1.0 - self.target_share)
            self.explore = float(min(1.0, max(self.min_keep, self.explore + self.adapt_rate * miss)))
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        return {
            "pre_select/skipped_prompts": float(self.skipped),
            "pre_select/completions_saved": float(self.skipped * self.num_generations),
            "pre_select/zero_variance_share": self.last_zero_share,
            "pre_select/noisy_share": self.last_noisy_share,
            "pre_select/recheck_rate": self.rechecked / self.drawn if self.drawn else 0.0,
            "pre_select/explore": self.explore,
        }

    def state_dict(self) -> dict:
        """History (tensors) and counters (Python scalars): loads with ``torch.load(weights_only=True)``."""
        return {"history": self.history.state_dict(), "explore": float(self.explore), "skipped": int(self.skipped),
                "drawn": int(self.drawn), "rechecked": int(self.rechecked),
                "last_zero_share": float(self.last_zero_share), "last_noisy_share": float(self.last_noisy_share)}

    def load_state_dict(self, state: dict) -> None:
        self.history.load_state_dict(state["history"])
        self.explore = float(state["explore"])
        self.skipped, self.drawn, self.rechecked = int(state["skipped"]), int(state["drawn"]), int(state["rechecked"])
        self.last_zero_share = float(state["last_zero_share"])
        self.last_noisy_share = float(state.get("last_noisy_share", float("nan")))
