"""The user's reward functions (`--reward`, `reward_funcs=`) as a run calls them: checked, counted, logged per domain.

TRL calls each reward function once per generation batch and turns a wrong return into a raw
`TypeError` or `ValueError`; `checked_values` refuses it first with one `RewardOutputError` naming the
reward, what it returned and the form it must take. `ScoredRewards` wraps the functions TRL trains with:
after the last function of a batch it logs, as the built-in verifier does, the per-domain mean of the
weighted reward (``tasks/reward/<domain>``, as TRL sums them: ``nansum`` of weight x reward) and each domain's
share of the batch (``tasks/share/<domain>``), and counts the completions no function scored (every one
returned None or NaN) and the groups made only of those: TRL gives such a group a NaN spread, which its
``frac_reward_zero_std`` does not count as zero, so without this count it would read as a signal group.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

from dataflex_callbacks.host.reward_values import reward_values
from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .options import RunInputError, reward_name


class RewardOutputError(RunInputError):
    """A user's reward function returned something other than one float (or None) per completion."""


def checked_values(reward: Callable, values, count: int) -> list[float]:
    """`values` returned by `reward` for `count` completions as floats (None and NaN as NaN); raises
    `RewardOutputError` for anything else: None, a bare number, text, a wrong length (`host.reward_values`)."""
    return reward_values(values, reward_name(reward), count, error=RewardOutputError)


class ScoredRewards:
    """The user's reward functions wrapped for TRL: their returns checked, the per-domain series logged, and the
    completions and groups no function scored counted.

    Args:
        rewards: the reward callables, in TRL's order (`resolve_rewards`).
        weights: one weight per function (`GRPOConfig.reward_weights`), default 1 each.
        num_generations: the group size (TRL lays a batch out as consecutive groups of this size).
    """

    def __init__(self, rewards: list[Callable], weights: list[float] | None, num_generations: int):
        self.rewards = list(rewards)
        self.weights = [1.0] * len(self.rewards) if weights is None else [float(w) for w in weights]
        self.num_generations = int(num_generations)
        self.completions = 0
        self.unscored_completions = 0
        self.unscored_groups = 0
        self._batch: list[list[float]] = []
        self._taken = (0, 0)

    def functions(self) -> list[Callable]:
        """The callables to pass to TRL, in order (an async function is passed as it is: TRL awaits it)."""
        return [
            reward if inspect.iscoroutinefunction(reward) else self._wrapped(index, reward)
            for index, reward in enumerate(self.rewards)
        ]

    def _wrapped(self, index: int, reward: Callable) -> Callable:
        def call(prompts, completions, **kwargs):
            values = checked_values(
                reward, reward(prompts=prompts, completions=completions, **kwargs), len(completions)
            )
            if index == 0:
                self._batch = []
            self._batch.append(values)
            if len(self._batch) == len(self.rewards):
                self._finish_batch(kwargs.get("domain"), kwargs.get("log_metric"))
            return [None if math.isnan(v) else v for v in values]

        call.__name__ = getattr(reward, "__name__", type(reward).__name__)  # TRL names its reward metrics by it
        call.__qualname__ = getattr(reward, "__qualname__", call.__name__)
        call.__module__ = getattr(reward, "__module__", None) or type(reward).__module__
        return call

    def _finish_batch(self, domains, log_metric) -> None:
        count = len(self._batch[0])
        scored = [any(not math.isnan(values[i]) for values in self._batch) for i in range(count)]
        totals = [
            sum(w * values[i] for w, values in zip(self.weights, self._batch, strict=True) if not math.isnan(values[i]))
            for i in range(count)
        ]
        self.completions += count
        self.unscored_completions += scored.count(False)
        size = self.num_generations
        self.unscored_groups += sum(
            1 for start in range(0, count - count % size, size) if not any(scored[start : start + size])
        )
        if not callable(log_metric) or not count:
            return
        domains = [str(d) for d in domains] if domains is not None else [NO_DOMAIN] * count
        for name in sorted(set(domains)):
            rows = [i for i, d in enumerate(domains) if d == name]
            values = [totals[i] for i in rows if scored[i]]
            if values:  # a domain nothing scored has no mean reward (the record reads None)
                log_metric(f"tasks/reward/{name}", sum(values) / len(values))
            log_metric(f"tasks/share/{name}", len(rows) / count)

    def take(self) -> tuple[int, int]:
        """``(completions no function scored, groups of only those)`` since the last call."""
        now = (self.unscored_completions, self.unscored_groups)
        taken = (now[0] - self._taken[0], now[1] - self._taken[1])
        self._taken = now
        return taken
