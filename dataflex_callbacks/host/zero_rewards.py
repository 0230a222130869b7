"""Warn when the first steps of a run scored every completion 0 or not at all, instead of training in silence.

A reward that pays nothing for any completion gives GRPO all-zero advantages: the run spends its budget
and its model does not move. The usual causes are a model that does not read the prompts' format and a
reward that reads the answer from the wrong place; both show in the first steps. `ZeroRewardWatch` reads
the rewards of those steps (the tensor gathered from every rank, the same on each, so every rank reaches
the same verdict) and warns once with a `ZeroRewardWarning` naming both causes and what to check. Every
host adapter feeds it: TRL (GRPO and RLOO) with the rewards TRL gathered, TRL's AsyncGRPOTrainer with
every group a step took from the rollout queue, Lightning with the gathered `RolloutBatch`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from dataflex_callbacks.errors import ArgumentError, ZeroRewardWarning, user_stacklevel

DEFAULT_WATCH_STEPS = 5
"""Steps a `ZeroRewardWatch` reads by default: enough that a reward paying a few percent of completions
pays at least one of the first steps' (at 64 completions a step, 320 completions), few enough that the
warning comes before a budget is spent."""

ZERO_REWARD_PREFIX = "dataflex: every reward of the first"
"""How every `ZeroRewardWarning` message starts (``dataflex compare`` finds it among a run's notes by it)."""

PROMPT_FORMATS = (
    "the testbed model (the default) reads reversed-digit arithmetic ('74+83=' -> '58', every number "
    "least-significant digit first) and 'sort 40913:'; the toy model (--suite toy) its four toy tasks "
    "('echo 3 8 5' -> '5'); a model of your own the format it was trained on (an instruct model: its chat "
    "template, which TRL applies to conversational prompts)"
)
"""The prompt format each shipped model reads, as the warning names it (docs/main_job.md, "Which prompts a model
reads")."""


class ZeroRewardWatch:
    """Warn once when every reward of a run's first ``steps`` steps is 0 or unscored (None/NaN).

    Call `observe` with each generated batch's rewards; it stops watching at the first reward that pays
    (a number other than 0) and after its verdict.

    Args:
        steps: the distinct steps to read before the verdict (`DEFAULT_WATCH_STEPS`).
        reward_names: the reward functions, named in the message (None: not named).
    """

    def __init__(self, steps: int = DEFAULT_WATCH_STEPS, reward_names: Sequence[str] | None = None):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ArgumentError(
                f"ZeroRewardWatch: argument 'steps' must be an int >= 1, the steps read before the verdict; got "
                f"{steps!r}. Use the default, {DEFAULT_WATCH_STEPS}"
            )
        self.steps = steps
        self.reward_names = None if reward_names is None else [str(name) for name in reward_names]
        self.completions = 0
        self.unscored = 0
        self.done = False
        self._steps_seen: set[int] = set()

    def observe(self, rewards: torch.Tensor, step: int, *, warn: bool = True) -> ZeroRewardWarning | None:
        """Read one batch's rewards at ``step``; returns the warning when this batch completes the verdict.

        Args:
            rewards: ``(N,)`` or ``(N, F)`` (one column per reward function), gathered from every rank; NaN
                where a reward returned None.
            step: the host's step counter; batches of one step (dynamic-sampling rounds, allocation pilots) count
                as one step.
            warn: whether this process shows the warning (the main process); every rank decides the same.
        """
        if self.done:
            return None
        values = rewards.detach().float()
        values = values.reshape(values.shape[0], -1) if values.dim() else values.reshape(1, 1)
        if bool(((values != 0) & ~torch.isnan(values)).any()):
            self.done = True  # a reward paid: the run has something to learn from
            return None
        self._steps_seen.add(int(step))
        self.completions += int(values.shape[0])
        self.unscored += int(torch.isnan(values).all(dim=1).sum())
        if len(self._steps_seen) < self.steps:
            return None
        self.done = True
        warning = ZeroRewardWarning(self.message(), self.steps, self.completions, self.unscored)
        if warn:
            warnings.warn(warning, stacklevel=user_stacklevel())
        return warning

    def message(self) -> str:
        """The warning's text: what was seen, the two likely causes, and what to check."""
        named = "" if not self.reward_names else f" of reward function(s) {self.reward_names}"
        if self.unscored == self.completions:
            seen = f"unscored: the reward returned None (or NaN) for all {self.completions} completions{named}"
        else:
            seen = (
                f"0 or None for all {self.completions} completions{named} ({self.unscored} unscored), so GRPO's "
                "advantages are all 0 and nothing trains"
            )
        return (
            f"{ZERO_REWARD_PREFIX} {self.steps} steps was {seen}. Likely causes: the model does not "
            f"read the prompts' format ({PROMPT_FORMATS}), or the reward reads the answer from the wrong slot (another "
            "column than the answer, or a part of the completion the model never writes: a tag, a boxed answer). "
            "Print one prompt, its completion and its reward to see which"
        )
