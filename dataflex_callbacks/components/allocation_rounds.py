"""`AllocationRounds`: one step's rounds of a rollout allocator, for a training loop of your own (and the hosts).

A loop holds ``P`` candidate prompts for a step. It asks how many completions each prompt gets,
generates them, reports their rewards, and asks again until the allocator answers 0 everywhere::

    rounds = strategy.allocation_rounds(keys, domains)               # the step's P prompts, every rank alike
    counts = rounds.start()                                          # (P,) the pilot: k per prompt
    while rounds.generating:
        rewards, prompt_index = generate_and_score(counts)           # your code: counts[i] completions of prompt i
        counts = rounds.add(rewards, prompt_index, sync=True)        # (P,) the next round (0: done)
    done = rounds.finish()                                           # which groups train, which reuse a response
    log(done.metrics)                                                # alloc/pilot_completions, ...

Several processes: each rank reports the rewards of the completions it generated, with their
prompt's index among the step's ``P`` prompts; ``sync=True`` all-gathers them (`_distributed`),
so every rank holds the same tally and takes the same decision, round after round. Each rank
then generates its own share of each round (any split, e.g. a contiguous block of the rows
``counts`` asks for), so no rank waits in a collective another rank skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from dataflex_callbacks._distributed import all_gather_rows
from dataflex_callbacks.components.allocation import Allocator, GroupTally, last_passing_rows, tally_groups
from dataflex_callbacks.errors import BatchError, HostError
from dataflex_callbacks.rollout.batch import NO_DOMAIN


@dataclass
class AllocatedGroups:
    """What a step's rounds decided, one entry per prompt ``(P,)``, and the metrics (``alloc/*``).

    ``trains``: the prompts whose groups train; ``reuses``: those whose group takes the prompt's stored
    earlier response (AR3PO's reuse); ``pilot`` / ``commit``: completions generated in the prompt's first
    round / later rounds; ``tally``: the final `GroupTally`; ``passing_rows``: each prompt's last completion
    above the threshold, as an index into the rows in the order they were reported (gathered), -1 where
    none: with AR3PO's reuse the host stores that response (``allocator.bank.store``) for later steps.
    """

    trains: torch.Tensor
    reuses: torch.Tensor
    pilot: torch.Tensor
    commit: torch.Tensor
    tally: GroupTally
    passing_rows: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class AllocationRounds:
    """The rounds of one step: ask the allocator, collect each round's rewards, decide the next round.

    Args:
        allocator: the `Allocator` (a host asks the strategy: `Strategy.allocation_rounds` builds these rounds).
        keys: the ``P`` prompts' keys (the posterior rule's history and the response bank read them).
        domains: the ``P`` prompts' domains (None: every prompt in `NO_DOMAIN`).
        max_rounds: rounds at most (None: until the allocator answers 0 everywhere).
        new_step: these rounds open a step (`Allocator.start_step`: the ``alloc/step_*`` counts restart); False for
            further rounds of the same step (a host's second screening round).
    """

    def __init__(
        self,
        allocator: Allocator,
        keys: Sequence[Any],
        domains: Sequence[str] | None = None,
        max_rounds: int | None = None,
        new_step: bool = True,
    ) -> None:
        if not isinstance(allocator, Allocator):
            raise BatchError(
                f"AllocationRounds needs an Allocator; got {type(allocator).__name__}: ask the strategy for its "
                "rounds, strategy.allocation_rounds(keys, domains), with an allocation part (e.g. the 'screen' preset)"
            )
        self.allocator = allocator
        self.keys = list(keys)
        self.domains = [NO_DOMAIN] * len(self.keys) if domains is None else [str(d) for d in domains]
        if len(self.domains) != len(self.keys):
            raise BatchError(f"AllocationRounds got {len(self.keys)} prompt keys but {len(self.domains)} domains")
        self.max_rounds = max_rounds
        if new_step:
            allocator.start_step()
        self.rewards = torch.zeros(0, dtype=torch.float64)
        self.prompt_index = torch.zeros(0, dtype=torch.long)
        self.pilot = torch.zeros(len(self.keys), dtype=torch.long)
        self.commit = torch.zeros(len(self.keys), dtype=torch.long)
        self.asked = torch.zeros(len(self.keys), dtype=torch.long)
        self.rounds = 0
        self.pilot_tally: GroupTally | None = None  # each prompt's first round, what the allocator learns from

    @property
    def generating(self) -> bool:
        """Whether the last answer asks for completions."""
        return bool(self.asked.any())

    def start(self) -> torch.Tensor:
        """``(P,)`` long: the first round, `Allocator.first_counts`: by default `Allocator.first_round` completions per
        prompt, 0 for a prompt to skip (`Allocator.skips_pilot`: a prompt a host should have dropped before its pilot
        costs nothing here); ``knapsack`` spreads a budget over the prompts."""
        asked = torch.as_tensor(self.allocator.first_counts(self.keys, self.domains)).to("cpu", torch.long)
        if asked.shape != (len(self.keys),) or bool((asked < 0).any()):
            raise BatchError(
                f"{type(self.allocator).__name__}.first_counts must return {len(self.keys)} counts >= 0, one per "
                f"prompt; got {asked.tolist()}"
            )
        self.asked = asked
        self.pilot = self.asked.clone()
        return self.asked.clone()

    def tally(self) -> GroupTally:
        """The `GroupTally` of every completion reported so far."""
        return tally_groups(self.rewards, self.prompt_index, len(self.keys), self.allocator.threshold)

    def add(self, rewards: torch.Tensor, prompt_index: torch.Tensor, sync: bool = False) -> torch.Tensor:
        """Report a round's completions (``rewards (n,)``, ``prompt_index (n,)`` in ``[0, P)``); return the next round.

        ``sync=True`` all-gathers the rows of every rank first. The gathered rows must be exactly what the
        round asked for (``counts[i]`` rows of prompt ``i``): a `HostError` names the first prompt that differs,
        or the first index outside ``[0, P)``.
        """
        rewards = rewards.detach().reshape(-1).to("cpu", torch.float64)
        prompt_index = prompt_index.detach().reshape(-1).to("cpu", torch.long)
        if rewards.shape != prompt_index.shape:
            raise BatchError(
                f"AllocationRounds.add got {rewards.shape[0]} rewards and {prompt_index.shape[0]} prompt indices; "
                "pass one prompt index per reward"
            )
        if sync:
            rewards, prompt_index = all_gather_rows(rewards), all_gather_rows(prompt_index)
        outside = (prompt_index < 0) | (prompt_index >= len(self.keys))
        if bool(outside.any()):
            raise HostError(
                f"AllocationRounds.add: 'prompt_index' must hold each completion's prompt as an index in "
                f"[0, {len(self.keys)}), one of the step's {len(self.keys)} prompts; got "
                f"{int(prompt_index[outside][0])} at row {int(torch.nonzero(outside)[0])}. Pass the prompt's position "
                "among the keys given to AllocationRounds"
            )
        got = torch.bincount(prompt_index, minlength=len(self.keys))
        if got.shape[0] != len(self.keys) or not torch.equal(got, self.asked):
            wrong = int(torch.nonzero(got[: len(self.keys)] != self.asked)[0]) if got.shape[0] == len(self.keys) else -1
            raise HostError(
                f"AllocationRounds: round {self.rounds} asked {self.asked.tolist()} completions per prompt but got "
                f"{got.tolist()} (first difference at prompt {wrong}); generate counts[i] completions of prompt i, "
                "and pass sync=True when each rank reports only its own"
            )
        if self.rounds > 0:
            self.commit += self.asked
        else:
            self.pilot_tally = tally_groups(rewards, prompt_index, len(self.keys), self.allocator.threshold)
        self.rewards = torch.cat([self.rewards, rewards])
        self.prompt_index = torch.cat([self.prompt_index, prompt_index])
        self.rounds += 1
        if self.max_rounds is not None and self.rounds >= self.max_rounds:
            self.asked = torch.zeros_like(self.asked)
        else:
            self.asked = self.allocator.next_round(self.tally(), self.keys, self.domains).to("cpu", torch.long)
        return self.asked.clone()

    def set_next(self, counts: torch.Tensor) -> None:
        """Ask ``counts (P,)`` in the next round instead of the allocator's answer.

        A host with a fixed batch calls it to decline commits it does not need this step, or to
        commit prompts the rule did not keep when the step must be filled (the TRL adapter's last
        screening round); the counts then record what was generated.
        """
        counts = torch.as_tensor(counts, dtype=torch.long).reshape(-1)
        if counts.shape[0] != len(self.keys) or bool((counts < 0).any()):
            raise BatchError(
                f"AllocationRounds.set_next needs {len(self.keys)} counts >= 0, one per prompt; got {counts.tolist()}"
            )
        self.asked = counts.clone()

    def finish(self) -> AllocatedGroups:
        """End the step: which groups train and reuse a response; the allocator learns and counts; the metrics."""
        tally = self.tally()
        trains = self.allocator.trains(tally).cpu()
        reuses = self.allocator.reuses(tally, self.keys).cpu() & trains
        self.allocator.observe(tally if self.pilot_tally is None else self.pilot_tally, self.keys, self.domains)
        signal = (tally.signal.cpu() | reuses) & trains  # a reused correct response gives an all-wrong group signal
        self.allocator.record(self.pilot, self.commit, reuses.long(), trains.long(), self.domains, signal.long())
        passing = last_passing_rows(self.rewards, self.prompt_index, len(self.keys), self.allocator.threshold)
        return AllocatedGroups(trains, reuses, self.pilot, self.commit, tally, passing, self.allocator.metrics())
