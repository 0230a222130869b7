"""Time every core component and full `Strategy.apply` against per-group Python-loop references.

    python benchmarks/bench_core.py                      # CPU, N=8192, groups of 8, L=1024, 1 thread
    python benchmarks/bench_core.py --device cuda --n 65536 --length 4096

The loop references are the test suite's independent implementations (tests/core/core_reference.py),
run in the same process on the same inputs. Group-level rows (marked G) target >= 20x over the loop
reference; the composite `Strategy.apply` targets < 20 ms on one CPU thread at the default size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "core"))

import core_reference as ref  # noqa: E402
from dataflex_callbacks import DomainTracker, RolloutBatch, build_component, build_strategy, list_presets  # noqa: E402
from dataflex_callbacks.reweighters import normalize_weights  # noqa: E402

DOMAINS = ["math", "code", "logic"]
COMPOSITE = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 1.0}},
}


def make_batch(n: int, group: int, length: int, device: str, seed: int = 0) -> RolloutBatch:
    gen = torch.Generator().manual_seed(seed)
    n_groups = n // group
    difficulty = torch.rand(n_groups, generator=gen).repeat_interleave(group)
    rewards = (torch.rand(n, generator=gen) > difficulty).float()
    lengths = torch.randint(length // 8, length + 1, (n,), generator=gen)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    advantages = torch.randn(n, generator=gen)
    gids = torch.arange(n) // group
    domains = [DOMAINS[g % len(DOMAINS)] for g in gids.tolist()]
    return RolloutBatch(rewards.to(device), group_ids=gids.to(device), completion_mask=mask.to(device),
                        advantages=advantages.to(device), logprobs=(-torch.rand(n, length, generator=gen) * 3).to(device),
                        entropies=torch.rand(n, length, generator=gen).to(device), domains=domains,
                        prompt_keys=[f"p{g}" for g in gids.tolist()])


class Timer:
    def __init__(self, device: str, repeat: int):
        self.cuda = device.startswith("cuda")
        self.repeat = repeat

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, fn, repeat: int | None = None, warmup: int = 2) -> float:
        """Median milliseconds of ``fn()`` over ``repeat`` runs, device synchronised around each."""
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat or self.repeat):
            self.sync()
            start = time.perf_counter()
            fn()
            self.sync()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)


def fresh(batch: RolloutBatch) -> RolloutBatch:
    # Derived fields (valid_mask, lengths) are cached per batch; time them as a host would see them once.
    batch._cache.clear()
    return batch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=8192, help="responses")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt")
    parser.add_argument("--length", type=int, default=1024, help="completion tokens L")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ref-repeat", type=int, default=1, help="runs of each (slow) loop reference")
    parser.add_argument("--no-reference", action="store_true", help="skip the loop references")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    batch = make_batch(args.n, args.group, args.length, args.device)
    timer = Timer(args.device, args.repeat)
    b = batch
    mask = b.valid_mask
    gids = b.group_ids
    solve = build_component("scorer", "group_solve_rate").score(b)
    magnitude = build_component("scorer", "advantage_magnitude").score(b)
    probs = b.logprobs.exp()
    keep_half = torch.rand(b.n, generator=torch.Generator().manual_seed(1)).to(b.device) > 0.5
    ones = torch.ones(b.n, dtype=torch.bool, device=b.device)
    comp = lambda kind, name, **p: build_component(kind, name, **p)  # noqa: E731

    # (label, group-level, core fn, reference fn or None)
    rows = [
        ("scorer group_solve_rate", True, lambda: comp("scorer", "group_solve_rate").score(b),
         lambda: ref.group_solve_rate(b.rewards, gids)),
        ("scorer group_reward_variance", True, lambda: comp("scorer", "group_reward_variance").score(b),
         lambda: ref.group_reward_variance(b.rewards, gids)),
        ("scorer advantage_magnitude", False, lambda: comp("scorer", "advantage_magnitude").score(fresh(b)),
         lambda: ref.advantage_magnitude(b.advantages, mask)),
        ("scorer response_length", False, lambda: comp("scorer", "response_length").score(fresh(b)),
         lambda: torch.tensor([float(mask[i].sum()) for i in range(b.n)])),
        ("scorer reward_efficiency", False, lambda: comp("scorer", "reward_efficiency").score(fresh(b)),
         lambda: torch.tensor([float(b.rewards[i]) / max(float(mask[i].sum()), 1.0) for i in range(b.n)])),
        ("scorer token_prob", False, lambda: comp("scorer", "token_prob").score(b), None),
        ("scorer token_entropy", False, lambda: comp("scorer", "token_entropy").score(b), None),
        ("selector threshold_band", False, lambda: comp("selector", "threshold_band", low=0.2, high=0.8).select(solve, b),
         lambda: ref.threshold_band(solve, 0.2, 0.8)),
        ("selector topk_fraction", False, lambda: comp("selector", "topk_fraction", fraction=0.5).select(magnitude, b),
         lambda: ref.topk_fraction(magnitude, 0.5)),
        # lengths are a cached batch property (one pass over the (N, L) mask, timed above as
        # response_length): both sides get them precomputed, so this row times the group selection.
        ("selector gfpo (k=3, efficiency)", True, lambda: comp("selector", "gfpo", k=3).select(b.rewards, b),
         lambda: ref.gfpo(b.rewards, b.lengths, gids, 3, "efficiency")),
        ("selector max_variance (0.5)", True, lambda: comp("selector", "max_variance").select(b.rewards, b),
         lambda: ref.max_variance_loop(b.rewards, gids, 0.5)),
        ("selector entropy_top_tokens (0.2)", False, lambda: comp("selector", "entropy_top_tokens").select(b.entropies, b),
         lambda: ref.top_tokens_by_sort(b.entropies, mask, 0.2)),
        ("reweighter softmax", False, lambda: comp("reweighter", "softmax").weights(magnitude, b, mask=keep_half),
         lambda: ref.normalize(ref.softmax_raw(magnitude, keep_half, 1.0), keep_half)),
        ("reweighter softmax per_group_mean_one", True,
         lambda: comp("reweighter", "softmax", normalize="per_group_mean_one").weights(magnitude, b, mask=keep_half),
         lambda: ref.normalize(ref.softmax_raw(magnitude, keep_half, 1.0), keep_half, "per_group_mean_one", gids)),
        ("reweighter difficulty_band", False, lambda: comp("reweighter", "difficulty_band").weights(solve, b, mask=ones),
         lambda: ref.normalize(ref.difficulty_band_raw(solve, ones, 0.25, 0.75, 2.0).to(b.device), ones)),
        ("reweighter reward_range", False, lambda: comp("reweighter", "reward_range").weights(solve, b, mask=ones),
         lambda: ref.normalize(ref.reward_range_raw(solve, 0.2, 0.8, 2.0, 1.0).to(b.device), ones)),
        ("reweighter per_advantage", False, lambda: comp("reweighter", "per_advantage").weights(magnitude, b, mask=ones),
         lambda: ref.normalize(ref.per_advantage_raw(magnitude, 0.6), ones)),
        ("reweighter advantage_reweight", False, lambda: comp("reweighter", "advantage_reweight").weights(probs, b),
         lambda: ref.normalize(ref.advantage_reweight_raw(probs, 0.3), mask)),
        ("normalize per_group_mean_one", True, lambda: normalize_weights(magnitude, keep_half, "per_group_mean_one", gids),
         lambda: ref.normalize(magnitude, keep_half, "per_group_mean_one", gids)),
    ]

    def tracker_core():
        DomainTracker(DOMAINS).update(b, step=0, sync=False)

    def tracker_ref():
        ref.ReferenceTracker(DOMAINS, 50).update(b.rewards.tolist(), list(b.domains), 0, b.advantages.tolist(), gids.cpu())

    rows.append(("DomainTracker.update", True, tracker_core, tracker_ref))
    tracker = DomainTracker(DOMAINS)
    for step in range(5):
        tracker.update(b, step=step, sync=False)
    for name in ("static", "reward_gap", "dump_ucb", "tscl", "learnability"):
        mixer = comp("mixer", name, domains=DOMAINS)
        rows.append((f"mixer {name}", False, lambda m=mixer: m.proportions(tracker), None))

    def composite_ref():
        keep = ref.threshold_band(ref.group_solve_rate(b.rewards, gids), 0.2, 0.8).to(b.device)
        return ref.normalize(ref.softmax_raw(ref.advantage_magnitude(b.advantages, mask), keep, 1.0), keep)

    strategies = [("apply composite difffilter+softmax", True, build_strategy(COMPOSITE), composite_ref)]
    for preset in list_presets():
        strategies.append((f"apply preset {preset}", False, build_strategy(preset), None))
    for label, group_level, strategy, reference in strategies:
        strategy.bind_domains(DOMAINS)
        steps = iter(range(10**9))
        rows.append((label, group_level, lambda s=strategy, it=steps: s.apply(fresh(b), next(it), sync=False), reference))

    print(f"device={args.device} N={args.n} group={args.group} L={args.length} threads={torch.get_num_threads()} "
          f"torch={torch.__version__}")
    header = f"{'component':42s} {'G':1s} {'core ms':>9s} {'loop ref ms':>12s} {'speed-up':>9s}"
    print(header)
    print("-" * len(header))
    missed = []
    for label, group_level, core_fn, ref_fn in rows:
        core_ms = timer(core_fn)
        ref_ms = None
        if ref_fn is not None and not args.no_reference:
            ref_ms = timer(ref_fn, repeat=args.ref_repeat, warmup=0)
        ratio = ref_ms / core_ms if ref_ms is not None and core_ms > 0 else None
        print(f"{label:42s} {'G' if group_level else ' '} {core_ms:9.2f} "
              f"{(f'{ref_ms:.1f}' if ref_ms is not None else '-'):>12s} {(f'{ratio:.0f}x' if ratio is not None else '-'):>9s}",
              flush=True)
        if group_level and ratio is not None and ratio < 20 and not label.startswith("apply"):
            missed.append(f"{label}: {ratio:.1f}x < 20x")
        if label.startswith("apply composite") and args.device == "cpu" and args.threads == 1 and core_ms >= 20:
            missed.append(f"{label}: {core_ms:.1f} ms >= 20 ms")
        if args.device.startswith("cuda") and group_level and not label.startswith("apply") and core_ms >= 3:
            missed.append(f"{label}: {core_ms:.2f} ms >= 3 ms on GPU")
    print("targets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
