"""Domain mixing with a plain PyTorch DataLoader: no trainer framework, runs in seconds on CPU.

    python examples/domain_mixing_dataloader.py

Part 1 changes the proportions by hand (``set_proportions``) and prints what the sampler drew.
Part 2 lets a strategy's mixer (``dump_ucb``) set them from synthetic rewards: the domain whose
prompts are never solved gives no learning signal, so it gets less data.
"""

from __future__ import annotations

import torch
from datasets import Dataset
from torch.utils.data import DataLoader

from dataflex_callbacks import DomainMixingSampler, RolloutBatch, build_strategy

DOMAINS = ["arithmetic", "spelling", "trivia"]


def make_dataset(rows_per_domain: int = 40) -> Dataset:
    rows = [
        {"prompt": f"{domain} question {i}", "domain": domain} for i in range(rows_per_domain) for domain in DOMAINS
    ]
    return Dataset.from_list(rows)


def shares(domains: list[str]) -> str:
    return "  ".join(f"{d}={domains.count(d) / len(domains):.2f}" for d in DOMAINS)


def fmt(proportions: dict[str, float]) -> str:
    return "  ".join(f"{d}={proportions[d]:.2f}" for d in DOMAINS)


def manual_schedule(dataset: Dataset) -> None:
    print("Part 1: proportions set by hand")
    schedule = [
        {"arithmetic": 0.8, "spelling": 0.1, "trivia": 0.1},
        {"arithmetic": 0.1, "spelling": 0.1, "trivia": 0.8},
        {"arithmetic": 1 / 3, "spelling": 1 / 3, "trivia": 1 / 3},
    ]
    sampler = DomainMixingSampler(dataset, proportions=schedule[0], batch_size=10, num_samples=600, seed=0)
    loader = DataLoader(dataset, batch_size=10, sampler=sampler)
    window: list[str] = []
    for step, batch in enumerate(loader):
        window += batch["domain"]
        if step % 20 == 19:
            print(
                f"  steps {step - 19:2d}-{step:2d}  target: {fmt(sampler.target_proportions)}  drawn: {shares(window)}"
            )
            window = []
            if step // 20 + 1 < len(schedule):
                sampler.set_proportions(schedule[step // 20 + 1])  # used from the next batch on
    print(f"  overall drawn: {fmt(sampler.actual_proportions())}")


def mixer_driven(dataset: Dataset, steps: int = 40, num_generations: int = 4) -> None:
    print("Part 2: proportions set by the dump_ucb mixer from rewards")
    strategy = build_strategy({"mix": {"mixer": "dump_ucb", "warmup_steps": 5, "update_every": 2}})
    prompts_per_step = 8
    sampler = DomainMixingSampler(
        dataset,
        strategy=strategy,
        batch_size=prompts_per_step,
        num_generations=num_generations,
        num_samples=prompts_per_step * steps,
        seed=0,
    )
    # One DataLoader batch = one chunk: 8 prompts, each repeated num_generations times in a row.
    loader = DataLoader(dataset, batch_size=prompts_per_step * num_generations, sampler=sampler)
    solve_rate = {"arithmetic": 0.6, "spelling": 0.4, "trivia": 0.0}  # trivia is never solved
    generator = torch.Generator().manual_seed(0)
    for step, batch in enumerate(loader):
        # Stand-in for generation + reward: one 0/1 reward per completion.
        rewards = torch.bernoulli(torch.tensor([solve_rate[d] for d in batch["domain"]]), generator=generator)
        group_ids = torch.arange(len(rewards)) // num_generations
        advantages = rewards - rewards.view(-1, num_generations).mean(1).repeat_interleave(num_generations)
        metrics = strategy.apply(
            RolloutBatch(rewards, group_ids=group_ids, advantages=advantages, domains=batch["domain"]), step
        ).metrics
        if step % 10 == 9:
            target = {d: metrics[f"mix/target/{d}"] for d in DOMAINS}
            actual = {d: metrics[f"mix/actual/{d}"] for d in DOMAINS}
            print(f"  step {step:2d}  target: {fmt(target)}  |  drawn (recent): {fmt(actual)}")
    print(f"  final target trivia={strategy.target_proportions['trivia']:.3f} (uniform {1 / len(DOMAINS):.3f})")


if __name__ == "__main__":
    torch.set_num_threads(1)
    data = make_dataset()
    manual_schedule(data)
    mixer_driven(data)
