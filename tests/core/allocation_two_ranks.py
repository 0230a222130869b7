"""Run by components/test_allocation.py: a few steps of allocation rounds, alone or as two gloo processes each
reporting its share.

Every round's rewards are drawn from a generator seeded by (step, round) over the rows the round asked for,
so one process and two processes see the same rewards; each rank reports the rows of its own prompts.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from dataflex_callbacks import build_strategy
from dataflex_callbacks.components.allocation import ScreenAllocator
from dataflex_callbacks.components.allocation_knapsack import KnapsackAllocator
from dataflex_callbacks.components.allocation_rounds import AllocationRounds

PASS_RATES = [0.0, 1.0, 0.5, 0.3, 0.9, 0.0, 0.6, 1.0]
GROUP_SIZE = 6


def run_steps(strategy, steps, rank: int = 0, world: int = 1) -> list[dict]:
    """Each step: 8 prompts (keys shared with the step before, so the history matters); the decisions, JSON-able."""
    allocator = strategy.allocation
    if allocator.group_size is None and isinstance(allocator, (ScreenAllocator, KnapsackAllocator)):
        allocator.bind_group_size(GROUP_SIZE)
    rates = torch.tensor(PASS_RATES, dtype=torch.float64)
    decisions = []
    for step in steps:
        keys = [f"p{(i + step) % 10}" for i in range(8)]
        rounds = AllocationRounds(allocator, keys, ["a", "b"] * 4)
        counts, asked = rounds.start(), []
        round_index = 0
        while rounds.generating:
            asked.append(counts.tolist())
            index = torch.repeat_interleave(torch.arange(8), counts)
            generator = torch.Generator().manual_seed(1000 * step + round_index)
            rewards = (torch.rand(index.shape[0], generator=generator, dtype=torch.float64) < rates[index]).double()
            mine = index % world == rank
            counts = rounds.add(rewards[mine], index[mine], sync=world > 1)
            round_index += 1
        done = rounds.finish()
        decisions.append(
            {
                "asked": asked,
                "trains": done.trains.tolist(),
                "metrics": done.metrics,
                "rows": int(done.tally.trials.sum()),
            }
        )
    return decisions


def run_two_ranks(out, spec="screen_posterior") -> list[dict]:
    """Run this script as two gloo processes writing into the folder ``out`` with the strategy ``spec`` (a preset name
    or a config dict); each rank's record, rank order."""
    from processes import run_ranks

    run_ranks(
        [
            [os.path.abspath(__file__), str(rank), "2", os.path.join(out, "init"), str(out), json.dumps(spec)]
            for rank in range(2)
        ]
    )
    ranks = []
    for rank in range(2):
        with open(os.path.join(out, f"rank{rank}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def main(rank: int, world: int, init_file: str, out: str, spec: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    decisions = run_steps(build_strategy(json.loads(spec)), range(3), rank, world)
    shapes = [[len(counts) for counts in step["asked"]] + [step["rows"]] for step in decisions]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"decisions": decisions, "shapes": shapes}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
