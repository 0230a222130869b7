"""The `Strategy`'s allocation doors: every host reaches the ``allocation`` part through these methods, never the part.

A host asks what the allocator declares (`AllocationDoors.allocation_needs`: equal group sizes, reuse, rounds per
step) instead of testing its class, binds its group size once, opens each step's `AllocationRounds`, and, when it fills
a fixed batch of groups (TRL's), sizes its screening rounds through `allocation_candidates` and
`note_allocation_screen`. `tests/core/strategy/test_strategy_ownership.py` fails on any read of
``<strategy>.allocation`` outside this package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dataflex_callbacks.components.allocation import Allocator, AllocatorNeeds
from dataflex_callbacks.components.allocation_memory import ResponseBank
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.errors import ConfigError


class AllocationDoors:
    """The allocation methods of `Strategy` (a base class of it); ``allocation`` is its `Allocator` or None."""

    name: str
    allocation: Allocator | None

    def observe_allocation_pilots(
        self, rewards: torch.Tensor, index: torch.Tensor, keys: Sequence[Any], domains: Sequence[str], step: int
    ) -> None:
        """Show a ``pre_select`` part every pilot group, once: ``rewards (n,)`` of the prompts ``index (n,)`` names in
        ``keys`` and ``domains``, each paid a pilot for (a skipped prompt saves its pilot). Nothing without the part."""
        if not self.skips_prompts:  # type: ignore[attr-defined]
            return
        from dataflex_callbacks.rollout.batch import RolloutBatch

        rows = index.tolist()
        batch = RolloutBatch(
            rewards.float(), group_ids=index, prompt_keys=[keys[i] for i in rows], domains=[domains[i] for i in rows]
        )
        self.set_completions_per_prompt(int(self.allocation_first_round() or 1))  # type: ignore[attr-defined]
        self.observe_prompt_groups(batch, step, sync=False)  # type: ignore[attr-defined]

    @property
    def trains_fewer_groups(self) -> bool:
        """Whether a step may train fewer groups than the host's batch: a ``pre_select`` part without refill, or an
        allocator that declares no refill, ``groups_per_step``, or groups of different sizes (`AllocatorNeeds`; the
        TRL adapter fills its batch around them with masked rows)."""
        needs = self.allocation_needs
        allocation_fewer = needs is not None and (
            not needs.refills or needs.groups_per_step is not None or not needs.equal_groups
        )
        return not self.refills_prompts or allocation_fewer  # type: ignore[attr-defined]

    def check_fewer_groups_loss(self) -> None:
        """Refuse ``fewer_groups_loss`` other than ``full`` where no step trains fewer groups (it would do nothing)."""
        loss = self.config.fewer_groups_loss  # type: ignore[attr-defined]
        if loss != "full" and not self.trains_fewer_groups:
            raise ConfigError(
                f"fewer_groups_loss: {loss} sets the loss of a step that trains fewer groups than the host's batch, "
                "but this strategy fills every step; set pre_select's refill: false or allocation's refill: false or "
                "groups_per_step: K, use an allocator of groups of different sizes (adaptive, knapsack), or drop "
                "fewer_groups_loss"
            )

    @property
    def allocates_rollouts(self) -> bool:
        """Whether an ``allocation`` part decides how many completions each prompt gets (the host then generates in
        rounds through `allocation_rounds`)."""
        return self.allocation is not None

    @property
    def allocation_needs(self) -> AllocatorNeeds | None:
        """What the ``allocation`` part declares a host must do (`AllocatorNeeds`); None without one.

        Read from the allocator itself, so an instance that declares less than its class (``adaptive`` without
        ``reuse`` puts no earlier response back) is not refused for what it will not do."""
        if self.allocation is None:
            return None
        return AllocatorNeeds.of(self.allocation)

    @property
    def allocation_group_size(self) -> int | None:
        """The group size G bound to the allocator (its ``group_size`` parameter, or the host's); None before."""
        return self._allocator("allocation_group_size").group_size

    @property
    def allocation_max_screens(self) -> int:
        """Screening rounds per step at most, for a host that fills a fixed batch of groups."""
        return int(self._allocator("allocation_max_screens").max_screens)

    def bind_allocation_group_size(self, group_size: int) -> None:
        """Bind the host's completions per trained group G (TRL's ``num_generations``) to the allocator, once, when the
        host binds; a G the rule refuses (a pilot of G or more) is a `ParamError` naming the fix."""
        self._allocator("bind_allocation_group_size").bind_group_size(group_size)

    def allocation_first_round(self, group_size: int | None = None) -> int | None:
        """Completions per prompt in the first round (the pilot) at groups of ``group_size`` (None: the bound one),
        checked on a copy of the allocator (nothing is bound); None when it needs a group size not known yet."""
        return self._allocator("allocation_first_round").first_round_at(group_size)

    def allocation_rounds(
        self,
        keys: Sequence[Any],
        domains: Sequence[str] | None = None,
        *,
        max_rounds: int | None = None,
        new_step: bool = True,
    ) -> AllocationRounds:
        """The rounds of one step's allocation over ``P`` prompts (``keys``, ``domains``: one per prompt, every rank
        alike); ``new_step=False`` for a further screening round of the same step (`AllocationRounds`)."""
        allocator = self._allocator("allocation_rounds")
        return AllocationRounds(allocator, keys, domains, max_rounds=max_rounds, new_step=new_step)

    def allocation_candidates(self, need: int, last: bool = False) -> int:
        """How many prompts to pilot for ``need`` more groups (`Allocator.candidates_for`); ``last``: the step's last
        screening round."""
        return int(self._allocator("allocation_candidates").candidates_for(need, last))

    def note_allocation_screen(self, screened: int, kept: int) -> None:
        """Count one screening round: ``screened`` prompts piloted, ``kept`` committed by the rule."""
        self._allocator("note_allocation_screen").note_screen(screened, kept)

    def allocation_skips_pilot(self, keys: Sequence[Any], domains: Sequence[str] | None = None) -> torch.Tensor:
        """``(P,)`` bool: the prompts a host drops before their pilot: evicted ones (``evict``) and, with
        ``min_prior_signal``, those predicted to give no signal (`Allocator.skips_pilot`; one domain per key, the same
        keys in the same order on every rank)."""
        return self._allocator("allocation_skips_pilot").skips_pilot(keys, domains)

    @property
    def allocation_response_bank(self) -> ResponseBank | None:
        """Where a host keeps each prompt's latest correct response for reuse (AR3PO): store a step's passing rows
        (``AllocatedGroups.passing_rows``) with ``bank.store(keys, completions, rewards)`` and put back
        ``bank.get(key)`` for each prompt ``AllocatedGroups.reuses`` marks. None when the allocator declares no
        ``reuses_responses`` (nothing to store); one that declares it keeps its bank as ``bank``."""
        allocator = self._allocator("allocation_response_bank")
        if not AllocatorNeeds.of(allocator).reuses_responses:
            return None
        bank = getattr(allocator, "bank", None)
        if not isinstance(bank, ResponseBank):
            raise ConfigError(
                f"allocation {type(allocator).__name__} declares reuses_responses but keeps no ResponseBank as "
                f"'bank' (got {bank!r}); set self.bank = ResponseBank() in its __init__, or declare "
                "reuses_responses = False"
            )
        return bank

    def allocation_metrics(self) -> dict[str, float]:
        """The allocator's ``alloc/*`` metrics so far (a host prefixes them as its logs do)."""
        return self._allocator("allocation_metrics").metrics()

    def _allocator(self, method: str) -> Allocator:
        if self.allocation is None:
            raise ConfigError(
                f"Strategy.{method}: strategy {self.name!r} has no allocation part, so nothing decides how many "
                "completions each prompt gets; check strategy.allocates_rollouts first, or add one (e.g. the "
                "'screen' or 'adaptive' preset)"
            )
        return self.allocation
