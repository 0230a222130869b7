"""Run by components/test_pre_select.py: two gloo processes update a PromptHistory with ``sync=True``,
each from its half of a batch.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from dataflex_callbacks import RolloutBatch, build_component

STEPS = 3


def global_batches():
    """The global batches of the run: per step 6 groups of 4 answers (one group per prompt), with domains and ids."""
    generator = torch.Generator().manual_seed(0)
    solve_rates = torch.tensor([0.0, 1.0, 0.5, 0.5, 0.0, 1.0]).repeat_interleave(4)
    for step in range(STEPS):
        rewards = (torch.rand(24, generator=generator) < solve_rates).float()
        ids = torch.randint(0, 2, (24, 3), generator=generator)
        keys = [f"p{g + 2 * step}" for g in range(6) for _ in range(4)]
        domains = [("a", "b")[g % 2] for g in range(6) for _ in range(4)]
        yield RolloutBatch(
            rewards=rewards, group_ids=torch.arange(24) // 4, prompt_keys=keys, domains=domains, completion_ids=ids
        )


def rows_of(batch: RolloutBatch, rows: slice) -> RolloutBatch:
    return RolloutBatch(
        rewards=batch.rewards[rows],
        group_ids=batch.group_ids[rows],
        prompt_keys=batch.prompt_keys[rows],
        domains=batch.domains[rows],
        completion_ids=batch.completion_ids[rows],
    )


def run_two_ranks(out, name: str = "skip_zero_variance") -> list[dict]:
    """Run this script as two gloo processes writing into the folder ``out``; each rank's record, rank order."""
    from processes import run_ranks

    run_ranks(
        [[os.path.abspath(__file__), str(rank), "2", os.path.join(out, "init"), str(out), name] for rank in range(2)]
    )
    ranks = []
    for rank in range(2):
        with open(os.path.join(out, f"rank{rank}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def main(rank: int, world: int, init_file: str, out: str, name: str = "skip_zero_variance") -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    pre_select = build_component("pre_select", name)
    for step, batch in enumerate(global_batches()):
        # Rank r holds groups 3r .. 3r + 2 of the global batch.
        pre_select.observe(rows_of(batch, slice(12 * rank, 12 * (rank + 1))), step, sync=True)
    state = pre_select.state_dict()
    history = state["history"]
    record = {
        "keys": history["keys"],
        "streak": history["streak"].tolist(),
        "seen": history["seen"].tolist(),
        "domain_prior": history["domain_prior"],
        "domain_noise": history["domain_noise"],
    }
    if name == "skip_predicted":
        record.update(domains=state["domains"], **{k: state[k].tolist() for k in ("groups", "no_signal", "solved")})
    else:
        record["explore"] = state["explore"]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], *sys.argv[5:])
