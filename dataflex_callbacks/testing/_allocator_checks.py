"""The conformance checks of a rollout allocator (kind ``allocation``), run by `check_component`.

An allocator is driven as a host drives it (`AllocationRounds`: a first round, then rounds until it answers 0
everywhere) on seeded 0/1 and real-valued rewards of prompts in several domains, over several steps:

* ``declarations``: `Allocator.first_round` is an int >= 1 once the group size is bound;
* ``output contract``: `Allocator.next_round` gives ``(P,)`` integer counts >= 0 on the tally's device, the same when
  asked twice (asking changes nothing), and the rounds end; `Allocator.trains` and `Allocator.reuses` give ``(P,)``
  bool; the tally passed in is left unchanged;
* ``counts``: ``alloc/step_generated`` is exactly the completions the step generated (pilots and commits), and
  ``alloc/generated`` their total over steps: what `dataflex run` and `dataflex compare` count a run's compute by;
* ``group loop``: ``next_round`` for a prompt alone equals its answer in the whole batch (a prompt's further
  completions follow from its own tally and what the allocator learnt before the step);
* ``cuda``: ``next_round`` on a CUDA tally equals the CPU answer (skipped without CUDA);
* ``state_dict``: a fresh allocator that loads the state decides and counts the next step as the saved one does
  (every allocator keeps its counts).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from dataflex_callbacks.components.allocation import GroupTally
from dataflex_callbacks.components.allocation_rounds import AllocationRounds

GROUP_SIZE = 8
PROMPTS = 12
STEPS = 3
MAX_ROUNDS = 64
DOMAINS = ("math", "code", "chat")


class AllocatorChecks:
    """Run an allocator through its checks; `fail(check, detail)` raises, `passed` and `skip` record in the report.

    Args:
        initial: the allocator in its initial state (copied for every use, never changed).
        fail: ``fail(check, detail)`` raises `ConformanceError`.
        passed: ``passed(check)`` records a passed check.
        skip: ``skip(check, reason)`` records a skipped check.
        seed: seeds the rewards.
        device: the CUDA device to compare against, or None without one.
    """

    def __init__(
        self,
        initial: Any,
        fail: Callable[[str, str], None],
        passed: Callable[[str], None],
        skip: Callable[[str, str], None],
        seed: int,
        device: str | None,
    ) -> None:
        self.initial, self.fail, self.passed, self.skip = initial, fail, passed, skip
        self.seed, self.device = seed, device

    def fresh(self) -> Any:
        """The allocator in its initial state with the group size bound (where it has none)."""
        allocator = copy.deepcopy(self.initial)
        if allocator.group_size is None:
            allocator.bind_group_size(GROUP_SIZE)
        return allocator

    def run(self) -> None:
        allocator = self.fresh()
        first = allocator.first_round()
        if isinstance(first, bool) or not isinstance(first, int) or first < 1:
            self.fail("declarations", f"first_round() returned {first!r}; return an int >= 1 (the pilot's size)")
        self.passed("declarations")
        for step in range(STEPS):
            self.step(allocator, step, checked=True)
        self.passed("output contract")
        self.passed("counts")
        self.passed("group loop")
        if self.device is None:
            self.skip("cuda", "CUDA is not available on this machine")
        else:
            self.passed("cuda")
        self.check_state()

    # ------------------------------------------------------------ one step, as a host runs it
    def rewards(self, step: int, round_index: int, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``counts[i]`` seeded rewards of prompt ``i`` (0/1 on even steps, real-valued on odd), each one's prompt."""
        index = torch.repeat_interleave(torch.arange(len(counts)), counts)
        gen = torch.Generator().manual_seed(self.seed * 1009 + step * 101 + round_index)
        # Prompts of different difficulty: prompt i passes with probability i / (P - 1), so some are unanimous.
        rate = index.double() / max(len(counts) - 1, 1)
        draws = torch.rand(len(index), generator=gen, dtype=torch.float64)
        rewards = (draws < rate).double() if step % 2 == 0 else draws * rate * 2
        return rewards, index

    def step(self, allocator: Any, step: int, checked: bool = False) -> list[torch.Tensor]:
        """Run one step's rounds; with ``checked``, check every answer. The answers, round by round."""
        keys = [f"prompt-{i}" for i in range(PROMPTS)]
        domains = [DOMAINS[i % len(DOMAINS)] for i in range(PROMPTS)]
        before = float(allocator.metrics().get("alloc/generated", 0.0))
        rounds = AllocationRounds(allocator, keys, domains)
        counts, answers, generated = rounds.start(), [], 0
        while rounds.generating:
            if rounds.rounds >= MAX_ROUNDS:
                self.fail("output contract", f"step {step}: still asking for completions after {MAX_ROUNDS} rounds")
            rewards, index = self.rewards(step, rounds.rounds, counts)
            generated += len(rewards)
            if checked and rounds.rounds > 0:
                self.check_answer(allocator, rounds.tally(), keys, domains, f"step {step}, round {rounds.rounds}")
            counts = rounds.add(rewards, index)
            answers.append(counts)
        if checked:
            self.check_answer(allocator, rounds.tally(), keys, domains, f"step {step}, round {rounds.rounds}")
            tally = rounds.tally()
            for name, mask in (("trains", allocator.trains(tally)), ("reuses", allocator.reuses(tally, keys))):
                if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != (PROMPTS,):
                    self.fail("output contract", f"step {step}: {name}() must return a ({PROMPTS},) bool tensor")
        done = rounds.finish()
        if checked:
            self.check_counts(done.metrics, generated, before, step)
        return answers

    def check_answer(self, allocator: Any, tally: GroupTally, keys: list[str], domains: list[str], where: str) -> None:
        """``next_round`` on ``tally``: its contract, the same when asked again, per prompt as in the batch, on CUDA."""
        saved = [t.clone() for t in tally]
        answer = allocator.next_round(tally, keys, domains)
        if not isinstance(answer, torch.Tensor) or answer.shape != (PROMPTS,):
            shape = tuple(answer.shape) if isinstance(answer, torch.Tensor) else type(answer).__name__
            self.fail("output contract", f"{where}: next_round returned {shape}; return a ({PROMPTS},) tensor")
        if answer.dtype.is_floating_point or answer.dtype == torch.bool or bool((answer < 0).any()):
            self.fail("output contract", f"{where}: next_round returned {answer.tolist()}; return integer counts >= 0")
        if answer.device != tally.trials.device:
            self.fail("output contract", f"{where}: next_round answered on {answer.device}, the tally is on the CPU")
        if any(not torch.equal(a, b) for a, b in zip(tally, saved, strict=True)):
            self.fail("output contract", f"{where}: next_round changed the tally passed in; leave it unchanged")
        again = allocator.next_round(tally, keys, domains)
        if not torch.equal(again, answer):
            self.fail(
                "output contract",
                f"{where}: next_round answered {answer.tolist()}, then {again.tolist()} on the same tally; asking "
                "must not change the allocator (learn in observe())",
            )
        for i in range(PROMPTS):
            alone = GroupTally(*(t[i : i + 1] for t in tally))
            got = allocator.next_round(alone, keys[i : i + 1], domains[i : i + 1])
            if int(got.reshape(-1)[0]) != int(answer[i]):
                self.fail(
                    "group loop",
                    f"{where}: prompt {i} alone gets {int(got.reshape(-1)[0])} further completions, {int(answer[i])} "
                    "in the whole batch; a prompt's answer must follow from its own tally and the allocator's state",
                )
        if self.device is not None:
            on_device = GroupTally(*(t.to(self.device) for t in tally))
            got = allocator.next_round(on_device, keys, domains).cpu()
            if not torch.equal(got.long(), answer.long()):
                self.fail("cuda", f"{where}: next_round on CUDA gave {got.tolist()}, on the CPU {answer.tolist()}")

    def check_counts(self, metrics: dict[str, float], generated: int, before: float, step: int) -> None:
        """``alloc/step_generated`` and the growth of ``alloc/generated`` are the step's generated completions."""
        step_generated = metrics.get("alloc/step_generated")
        total = metrics.get("alloc/generated")
        if step_generated is None or total is None or int(step_generated) != generated or total - before != generated:
            self.fail(
                "counts",
                f"step {step}: the host generated {generated} completions (pilots and commits) but the metrics say "
                f"alloc/step_generated={step_generated} and alloc/generated grew by "
                f"{None if total is None else total - before}; count them with Allocator.record "
                "(AllocationRounds.finish does), which dataflex run and compare read",
            )

    def check_state(self) -> None:
        """A fresh allocator that loads the state of one two steps in decides and counts the third step alike."""
        first = self.fresh()
        for step in range(2):
            self.step(first, step)
        second = self.fresh()
        second.load_state_dict(copy.deepcopy(first.state_dict()))
        want, got = self.step(first, 2), self.step(second, 2)
        if len(want) != len(got) or any(not torch.equal(a, b) for a, b in zip(want, got, strict=True)):
            self.fail(
                "state_dict",
                f"a fresh allocator after load_state_dict answered {[a.tolist() for a in got]}, the saved one "
                f"{[a.tolist() for a in want]}",
            )
        if first.metrics() != second.metrics():
            self.fail("state_dict", "a fresh allocator after load_state_dict counts differently from the saved one")
        self.passed("state_dict")
