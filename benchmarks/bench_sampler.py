"""Time `DomainMixingSampler` against a plain `torch.utils.data.RandomSampler` in the same run.

    python benchmarks/bench_sampler.py                         # 1,000,000 indices, 10 domains
    python benchmarks/bench_sampler.py --batch-sizes 64 --repeats 9 --modes independent

Both samplers yield ``--draws`` indices over a dataset of ``--draws`` rows; the mixing sampler's
rows fall into ``--domains`` domains of unequal size. Modes (``--modes``):

- ``independent`` (the default draw): built with uniform proportions, and every ``--update-every``
  indices it gets new random valid proportions through ``set_proportions`` (validation included);
- ``exact``: the same with ``quota="exact"`` (largest-remainder quotas in every chunk);
- ``pool``: no proportions, no mix part: one pool over all rows, the data's own distribution.

Repetitions alternate between the two samplers so machine noise hits both; the table gives the
median seconds of each and the ratio of medians. Target: under 5x ``RandomSampler``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections import deque

import numpy as np
import torch
from torch.utils.data import RandomSampler

from dataflex_callbacks import DomainMixingSampler


def consume(iterator, n: int) -> None:
    deque(itertools.islice(iterator, n), maxlen=0)


def time_mixing(labels, batch_size: int, draws: int, update_every: int, schedule: list[dict], mode: str) -> float:
    if mode == "pool":
        sampler = DomainMixingSampler(labels=labels, batch_size=batch_size, num_samples=draws, seed=0)
    else:
        sampler = DomainMixingSampler(
            labels=labels,
            batch_size=batch_size,
            num_samples=draws,
            seed=0,
            proportions={d: 1 / len(schedule[0]) for d in schedule[0]},
            quota=mode,
        )
    start = time.perf_counter()
    iterator = iter(sampler)
    for block in range(draws // update_every):
        consume(iterator, update_every)
        if mode != "pool":
            sampler.set_proportions(schedule[block % len(schedule)])
    consume(iterator, draws)  # the remainder, if any
    return time.perf_counter() - start


def time_random(draws: int, update_every: int) -> float:
    sampler = RandomSampler(range(draws), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    iterator = iter(sampler)
    for _ in range(draws // update_every):
        consume(iterator, update_every)
    consume(iterator, draws)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1_000_000)
    parser.add_argument("--domains", type=int, default=10)
    parser.add_argument("--update-every", type=int, default=1000)
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[8, 64, 1000],
        help="prompts per chunk (proportions are read once per chunk)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--modes", nargs="+", default=["independent", "exact", "pool"], choices=["independent", "exact", "pool"]
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 2.0, args.domains)
    domain_of_row = rng.choice(args.domains, size=args.draws, p=weights / weights.sum())
    names = [f"domain{k}" for k in range(args.domains)]
    labels = [names[k] for k in domain_of_row]
    schedule = []
    for p in rng.dirichlet(np.ones(args.domains), size=997):
        p = p / p.sum()
        schedule.append({d: float(v) for d, v in zip(names, p, strict=True)})

    print(
        f"{args.draws:,} indices, {args.domains} domains, set_proportions every {args.update_every:,} draws, "
        f"median of {args.repeats} alternating repetitions, 1 thread"
    )
    print(
        f"{'mode':>11} {'batch_size':>10} {'DomainMixingSampler s':>22} {'RandomSampler s':>16} {'ratio':>7}  "
        "target < 5x"
    )
    for mode in args.modes:
        for batch_size in args.batch_sizes:
            ours, theirs = [], []
            for _ in range(args.repeats):
                ours.append(time_mixing(labels, batch_size, args.draws, args.update_every, schedule, mode))
                theirs.append(time_random(args.draws, args.update_every))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{mode:>11} {batch_size:>10} {a:>22.3f} {b:>16.3f} {a / b:>6.2f}x  {'ok' if a / b < 5 else 'OVER'}")


if __name__ == "__main__":
    main()
