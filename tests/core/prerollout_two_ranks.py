"""Run by test_prerollout.py: two gloo processes update a PromptHistory with ``sync=True``, each from its half of a batch."""

import json
import os
import sys

import torch
import torch.distributed as dist

from dataflex_callbacks import RolloutBatch, build_component


def main(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    prompt_filter = build_component("prerollout", "skip_zero_variance")
    generator = torch.Generator().manual_seed(0)
    for step in range(3):
        # The global batch: 6 groups of 4 (one per prompt), rank r holds groups 3r .. 3r + 2.
        rewards = (torch.rand(24, generator=generator) < torch.tensor([0.0, 1.0, 0.5, 0.5, 0.0, 1.0]).repeat_interleave(4)).float()
        ids = torch.randint(0, 2, (24, 3), generator=generator)
        rows = slice(12 * rank, 12 * (rank + 1))
        keys = [f"p{g + 2 * step}" for g in range(6) for _ in range(4)]
        domains = [("a", "b")[g % 2] for g in range(6) for _ in range(4)]
        batch = RolloutBatch(rewards=rewards[rows], group_ids=torch.arange(24)[rows] // 4, prompt_keys=keys[rows],
                             domains=domains[rows], completion_ids=ids[rows])
        prompt_filter.observe(batch, step, sync=True)
    state = prompt_filter.state_dict()
    history = state["history"]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"keys": history["keys"], "streak": history["streak"].tolist(), "seen": history["seen"].tolist(),
                   "domain_prior": history["domain_prior"], "domain_noise": history["domain_noise"],
                   "explore": state["explore"]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
