"""New strategy components written as a user would: with the public ``dataflex_callbacks`` API only.

testing/test_conformance.py runs each (but `RandomScore`) through ``dataflex_callbacks.testing.check_component``
and checks that this module imports nothing else; test_registry.py names them in configs by import path
(``custom_components:GroupCenteredReward``) and by a registered name; host/test_contract.py names
``custom_components:RandomScore`` (a strategy with CPU randomness) in a config.
"""

import torch

from dataflex_callbacks import Mixer, Reweighter, Scorer, Selector


def group_means(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Mean of ``values (N,)`` over each row's group: ``(N,)``."""
    index = torch.unique(group_ids, return_inverse=True)[1]
    groups = int(index.max()) + 1 if index.numel() else 0
    sums = torch.zeros(groups, device=values.device).index_add_(0, index, values)
    counts = torch.bincount(index, minlength=groups).to(values.dtype)
    return (sums / counts)[index]


class GroupCenteredReward(Scorer):
    """r_i minus the mean reward of its group (a GRPO advantage without the division by the std)."""

    requires = ("rewards", "group_ids")
    needs_groups = True
    scope = "group"

    def _score(self, batch):
        rewards = batch.rewards.float()
        return rewards - group_means(rewards, batch.group_ids)


class RunningBaselineReward(Scorer):
    """r_i minus a running mean of the rewards of earlier batches (its state)."""

    scope = "row"

    def __init__(self, momentum: float = 0.9):
        self.momentum = float(momentum)
        self.baseline = 0.0

    def _score(self, batch):
        rewards = batch.rewards.float()
        scores = rewards - self.baseline
        if rewards.numel():
            self.baseline = self.momentum * self.baseline + (1 - self.momentum) * float(rewards.mean())
        return scores

    def state_dict(self) -> dict:
        return {"baseline": self.baseline}

    def load_state_dict(self, state: dict) -> None:
        self.baseline = float(state["baseline"])


class BestOfGroup(Selector):
    """Keep the best-scoring response of each group."""

    requires = ("group_ids",)
    needs_groups = True
    scope = "group"

    def _select(self, scores, batch):
        index = torch.unique(batch.group_ids, return_inverse=True)[1]
        best = torch.full((int(index.max()) + 1 if index.numel() else 0,), float("-inf"), device=scores.device)
        best = best.scatter_reduce(0, index, scores.float(), reduce="amax")
        return scores.float() == best[index]


class LinearWeights(Reweighter):
    """w_i proportional to offset + max(score_i, 0)."""

    scope = "row"

    def __init__(self, offset: float = 0.5, normalize: str = "mean_one"):
        super().__init__(normalize)
        self.offset = float(offset)

    def _raw(self, scores, mask):
        return scores.clamp_min(0.0).add_(self.offset)  # a new tensor: scores belong to the caller


class LowestRewardFirst(Mixer):
    """Proportions rising as a domain's windowed mean reward (0 to 1) falls; an unobserved domain counts as reward 0."""

    def __init__(self, domains=None, floor: float = 0.05):
        super().__init__(domains, floor)

    def raw_proportions(self, tracker):
        reward = torch.nan_to_num(tracker.mean_reward(), nan=0.0).clamp(0.0, 1.0)
        return 1.1 - reward


class RandomScore(Scorer):
    """A score drawn from torch's default CPU generator: a strategy with CPU randomness."""

    scope = "batch"

    def _score(self, batch):
        return torch.rand(batch.n)
