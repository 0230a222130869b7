"""AR3PO's reuse in TRL's GRPOTrainer: a group still all wrong at the cap takes its prompt's earlier correct row.

`StagedReuse` serves `allocation.Allocation.generate_stages` when the allocator declares ``reuses_responses``
(``adaptive`` with ``reuse: true``). At the end of a step's stages (`AllocationRounds.finish`):

1. each prompt ``AllocatedGroups.reuses`` marks gets its stored row back, one row appended to its group before the
   advantages are computed over the groups (`put_back`), so the all-wrong group now carries signal;
2. each prompt's latest passing row of the step (``AllocatedGroups.passing_rows``) is stored in the strategy's
   `ResponseBank` (`store`): the row payload `rounds.round_rows` made of it (its slice of every per-row tensor of
   TRL's batch and its ``(F,)`` rewards), copied to the CPU as plain tensors, so the strategy's checkpoint holds it
   and loads with safe loading.

A reused row is off-policy: it was generated, and its ``old_per_token_logps`` (when TRL computed them) and
``sampling_per_token_logps`` were taken, under the older policy of the step that stored it. They are kept, as AR3PO
keeps the earlier response: TRL's importance ratio for that row is then against the policy that generated it.

A reused row takes a row of TRL's ``B x num_generations`` batch (one that would otherwise be a masked filler). While
the stages run, one row per prompt that has a stored row and no pass yet is kept free (`reserve`), so a prompt that
ends all wrong at the cap finds room. A reuse still without room is skipped: when the first stage fills the batch
(``stage = cap = num_generations``), when several processes need the reused rows in multiples of their number (the
rows split evenly over them; the first prompts' reuses are kept), or when the stored row lacks a per-row tensor the
step's batch has (a run resumed with other TRL settings). A skipped reuse is counted (``alloc/step_reuses_skipped``,
``alloc/reuses_skipped``) and taken off the allocator's count of reused responses: ``alloc/reused_responses``,
``alloc/step_reused_responses`` and ``alloc/reused_share`` count the rows trained (its per-domain counts and
``alloc/signal_groups`` count the allocator's decisions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dataflex_callbacks.components.allocation_memory import ResponseBank
from dataflex_callbacks.components.allocation_rounds import AllocatedGroups, AllocationRounds

REWARDS_KEY = "rewards_per_func"
"""The stored row's ``(F,)`` rewards, beside its slice of each per-row tensor of TRL's batch."""


class StagedReuse:
    """Put stored correct rows back into all-wrong groups of the TRL adapter's stages, and store the step's passes.

    Args:
        strategy: the bound strategy; its allocator keeps the `ResponseBank` (`Strategy.allocation_response_bank`).
    """

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy
        self.skipped = 0  # reuses the run skipped for want of room, all steps (saved with the adapter's state)

    @property
    def bank(self) -> ResponseBank | None:
        """The allocator's bank; None when it reuses no response (nothing to store or put back)."""
        if self.strategy.allocation_needs is None:
            return None
        return self.strategy.allocation_response_bank

    def holding(self, keys: Sequence[Any]) -> torch.Tensor:
        """``(P,)`` bool: the step's prompts with a stored row (all False without a bank)."""
        bank = self.bank
        return torch.zeros(len(keys), dtype=torch.bool) if bank is None else bank.holds(keys)

    def reserve(self, rounds: AllocationRounds, holding: torch.Tensor) -> int:
        """Rows to keep free in TRL's batch for reuses: one per prompt ``holding`` a stored row that has no pass yet
        (0 before the first stage, which every prompt gets)."""
        if rounds.rounds == 0 or not bool(holding.any()):
            return 0
        return int((holding & (rounds.tally().passes.cpu() == 0)).sum())

    def put_back(
        self, done: AllocatedGroups, prompts: list, keys: Sequence[Any], rows: list, room: int, processes: int
    ) -> tuple[list, torch.Tensor, int]:
        """The stored rows of the prompts ``done.reuses`` marks, as row payloads to append to the step's ``rows``.

        Args:
            done: what the step's rounds decided.
            prompts: the step's ``P`` dataset rows (a reused row's ``input``: the same prompt).
            keys: their keys in the bank.
            rows: the step's generated row payloads (the layout of a reused row: its per-row tensors and device).
            room: rows of TRL's batch left free.
            processes: the processes the rows split over (the rows put back are a multiple of it).

        Returns:
            ``(reused_rows, prompt_index (n,), skipped)``: the payloads, each one's prompt, and the reuses skipped.
        """
        wanted = done.reuses.nonzero().flatten().tolist()
        bank = self.bank
        if not wanted or bank is None:
            return [], torch.zeros(0, dtype=torch.long), 0
        layout = rows[0]["tensors"]
        stored = {i: bank.get(keys[i])[0] for i in wanted}
        fitting = [i for i in wanted if isinstance(stored[i], Mapping) and set(stored[i]) == {*layout, REWARDS_KEY}]
        chosen = fitting[: max(min(len(fitting), room), 0) // processes * processes]
        reused = [_payload(prompts[i], stored[i], rows[0]) for i in chosen]
        return reused, torch.tensor(chosen, dtype=torch.long), len(wanted) - len(chosen)

    def store(self, done: AllocatedGroups, keys: Sequence[Any], rows: list, rewards: torch.Tensor) -> None:
        """Store each prompt's latest passing row of the step (``done.passing_rows`` into ``rows``, the payloads in
        the order their ``rewards (n,)`` were reported) as its earlier correct response."""
        bank = self.bank
        if bank is None:
            return
        passing = done.passing_rows.cpu()
        prompts = (passing >= 0).nonzero().flatten().tolist()
        chosen = [int(passing[i]) for i in prompts]
        bank.store(
            [keys[i] for i in prompts],
            [{**rows[r]["tensors"], REWARDS_KEY: rows[r]["rewards"]} for r in chosen],
            rewards[chosen].tolist(),
        )

    def count(self, metrics: dict[str, float], placed: int, skipped: int) -> None:
        """Write this step's reuses into ``metrics`` (the allocator's ``alloc/*``, in place): the rows trained, and
        the skipped ones apart (the allocator counted every reuse it decided)."""
        if self.bank is None:
            return
        self.skipped += skipped
        reused = metrics["alloc/reused_responses"] - self.skipped
        metrics["alloc/reused_responses"] = reused
        metrics["alloc/step_reused_responses"] = float(placed)
        metrics["alloc/reused_share"] = reused / max(metrics["alloc/generated"] + reused, 1.0)
        metrics["alloc/step_reuses_skipped"] = float(skipped)
        metrics["alloc/reuses_skipped"] = float(self.skipped)

    def state_dict(self) -> dict:
        """The reuses skipped so far (the stored rows are in the strategy's state, with the allocator's bank)."""
        return {"skipped": self.skipped}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.skipped = int(state.get("skipped", 0))


def _payload(prompt: Mapping[str, Any], stored: Mapping[str, torch.Tensor], like: Mapping[str, Any]) -> dict:
    """A stored row as `rounds.assemble` reads a row (the step's dataset row of its prompt, its rewards and tensors),
    on the devices of the step's row ``like``."""
    tensors = {name: stored[name].to(value.device) for name, value in like["tensors"].items()}
    return {"input": prompt, "rewards": stored[REWARDS_KEY].to(like["rewards"].device), "tensors": tensors}
