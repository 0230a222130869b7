"""Pre-rollout acceptance: take prompts a filter keeps, skip the rest, and carry what was not looked at.

Every place that draws prompts through a ``pre_select`` filter (the `DomainMixingSampler`, TRL's
dynamic-sampling stream and streamed datasets, verl's prompt feed) runs the same loop: offer
candidates in draw order, accept each with the filter's keep probability (`accept_prompts`), keep
the candidates after the last accepted one for the next offer, until enough were accepted
(`accept_from`). A host supplies only where its candidates come from (a `PromptSource`);
`BatchFeed` is the source of a host whose candidates come in whole batches (verl's dataloader).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass
class PromptAcceptance:
    """What one pass of `accept_prompts` over a list of candidate prompts took.

    Attributes:
        accepted: ``(A,)`` int64 positions of the accepted candidates, ``A <= need``, ascending.
        considered: candidates looked at: up to and including the last accepted one when ``need``
            was met, else all of them; the rest wait for the next pass.
        skipped: considered candidates the filter turned down (excluded ones are not counted).
    """

    accepted: np.ndarray
    considered: int
    skipped: int


def accept_prompts(
    pre_select: Any,
    keys: Sequence[Hashable],
    need: int,
    rng: np.random.Generator,
    *,
    labels: Sequence[str] | None = None,
    exclude: np.ndarray | None = None,
) -> PromptAcceptance:
    """Take up to ``need`` of the candidate prompts, in order, each with the filter's keep probability.

    Each candidate draws one uniform from ``rng``; it is accepted when the uniform is below
    ``pre_select.keep_probability(keys, labels)``. Candidates after the ``need``-th accepted one
    are not considered (the caller offers them again), so no uniform is wasted on a decision
    nobody used.

    Args:
        pre_select: a pre-rollout filter (``keep_probability(keys, labels) -> (n,)``).
        keys: the ``n`` candidates' prompt keys, in draw order.
        need: how many prompts are still wanted, ``>= 1``.
        rng: the host's generator for these draws (``n`` uniforms are drawn).
        labels: the candidates' domains, for the filter's prior on unseen prompts.
        exclude: ``(n,)`` bool, candidates never to take (e.g. already in this batch).
    """
    keep_probability = pre_select.keep_probability(list(keys), labels)
    if exclude is not None:
        keep_probability = np.where(exclude, 0.0, keep_probability)
    accepted = np.flatnonzero(rng.random(len(keys)) < keep_probability)[:need]
    considered = int(accepted[-1]) + 1 if len(accepted) == need else len(keys)
    excluded = 0 if exclude is None else int(np.asarray(exclude)[:considered].sum())
    return PromptAcceptance(accepted=accepted, considered=considered, skipped=considered - len(accepted) - excluded)


@dataclass
class Candidates:
    """The prompts a `PromptSource` offers next, in draw order.

    Attributes:
        keys: the ``n`` candidates' prompt keys.
        labels: their domains, for the filter's prior on unseen prompts (None: no prior by domain).
        exclude: ``(n,)`` bool, candidates never to take (e.g. already in this batch).
    """

    keys: Sequence[Hashable]
    labels: Sequence[str] | None = None
    exclude: np.ndarray | None = None


class PromptSource(Protocol):
    """Where a host's candidate prompts come from, for `accept_from`."""

    def offer(self, need: int) -> Candidates:
        """The next candidates, not yet consumed (at least one); ``need`` prompts are still wanted."""

    def take(self, accepted: np.ndarray, considered: int) -> None:
        """Consume the first ``considered`` offered candidates, of which those at ``accepted (A,)`` were accepted."""


@dataclass
class AcceptedPrompts:
    """What `accept_from` drew: the accepted prompts' keys in draw order, and the candidates skipped."""

    keys: list
    skipped: int


def accept_from(
    source: PromptSource, pre_select: Any, need: int, rng: np.random.Generator, *, record: bool = True
) -> AcceptedPrompts:
    """Draw ``need`` prompts the filter accepts from ``source``: the one acceptance loop of every host.

    Each round offers the source's next candidates to `accept_prompts` for the prompts still
    wanted; the source consumes the candidates considered and keeps the rest for the next round
    (or the next call), so no candidate is judged twice and none is lost.

    Args:
        source: the host's candidates (`PromptSource`).
        pre_select: the strategy's pre-rollout filter.
        need: how many prompts to accept, ``>= 1``.
        rng: the host's generator for the acceptance uniforms (one per candidate considered).
        record: report the draw to the filter (``record_draws(keys, skipped)``); False when the
            caller combines several draws into one report (the sampler's per-domain blocks).
    """
    keys: list = []
    skipped = 0
    while len(keys) < need:
        offered = source.offer(need - len(keys))
        passed = accept_prompts(
            pre_select, offered.keys, need - len(keys), rng, labels=offered.labels, exclude=offered.exclude
        )
        keys.extend(offered.keys[i] for i in passed.accepted.tolist())
        skipped += passed.skipped
        source.take(passed.accepted, passed.considered)
    if record:
        pre_select.record_draws(keys, skipped)
    return AcceptedPrompts(keys=keys, skipped=skipped)


class BatchFeed:
    """A `PromptSource` over a host's batches of candidates: what was not considered is carried to the next draw.

    Args:
        fetch: ``fetch() -> batch``, the host's next batch of candidate prompts.
        describe: ``describe(batch) -> Candidates``, the batch's keys (and labels) in row order.
        select: ``select(batch, rows) -> batch``, the rows at the positions ``rows`` (a list of int).

    After `accept_from`, `accepted` holds the accepted rows as one ``select`` of each batch they
    came from, in draw order; `carry` holds the rows waiting for the next draw (None when none).
    """

    def __init__(
        self, fetch: Callable[[], Any], describe: Callable[[Any], Candidates], select: Callable[[Any, list], Any]
    ) -> None:
        self.fetch, self.describe, self.select = fetch, describe, select
        self.carry: Any = None
        self.accepted: list = []
        self._batch: Any = None
        self._size = 0

    def offer(self, need: int) -> Candidates:
        if self.carry is not None:
            self._batch, self.carry = self.carry, None
        else:
            self._batch = self.fetch()
        offered = self.describe(self._batch)
        self._size = len(offered.keys)
        return offered

    def take(self, accepted: np.ndarray, considered: int) -> None:
        if considered < self._size:  # rows after the last accepted one wait for the next draw
            self.carry = self.select(self._batch, list(range(considered, self._size)))
        if len(accepted):
            self.accepted.append(self.select(self._batch, accepted.tolist()))
        self._batch = None


def set_group_size(pre_select: Any, completions: int) -> None:
    """Tell a pre-rollout filter what a skipped prompt would have cost: ``completions`` generated per prompt.

    Read by its ``pre_select/completions_redirected`` metric (the host fills its batch with other prompts, so
    those completions are generated for the replacements); every host that draws prompts sets it
    (its ``num_generations``, verl's ``rollout.n``, a Lightning step's mean group size).
    """
    if pre_select is not None:
        pre_select.num_generations = int(completions)
