"""Time every core component and full `Strategy.apply` against per-group Python-loop references.

    python benchmarks/bench_core.py                      # CPU, N=8192, groups of 8, L=1024, 1 thread
    python benchmarks/bench_core.py --device cuda --n 65536 --length 4096

Three columns per row, same process, same inputs: the core, the test suite's per-group / per-row
Python-loop reference (tests/core/core_reference.py; presets compose the component references) and
DataFlex-RL's own method as we read it (its vectorised scorers and np.unique group loops, the
``dfrl_*`` functions there). Rows marked "(N,L) bool" use verl's form: (N, L) advantages and a
bool completion mask. Targets: >= 20x the loop reference and >= 1x DataFlex-RL's method on every
row that has them; the composite `Strategy.apply` < 20 ms on one CPU thread at the default size.
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
from dataflex_callbacks.components.reweighters import normalize_weights  # noqa: E402
from dataflex_callbacks.components.scorers import check_finite_scores  # noqa: E402

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
    return RolloutBatch(
        rewards.to(device),
        group_ids=gids.to(device),
        completion_mask=mask.to(device),
        advantages=advantages.to(device),
        logprobs=(-torch.rand(n, length, generator=gen) * 3).to(device),
        entropies=torch.rand(n, length, generator=gen).to(device),
        domains=domains,
        prompt_keys=[f"p{g}" for g in gids.tolist()],
    )


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


def loop_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Per-row Python loop: valid tokens of each response."""
    return torch.tensor([float(mask[i].sum()) for i in range(mask.shape[0])], device=mask.device)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=8192, help="responses")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt")
    parser.add_argument("--length", type=int, default=1024, help="completion tokens L")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ref-repeat", type=int, default=1, help="runs of each (slow) loop reference")
    parser.add_argument("--no-reference", action="store_true", help="skip the loop and DataFlex-RL references")
    parser.add_argument("--only", default="", help="run only rows whose label contains this text")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    batch = make_batch(args.n, args.group, args.length, args.device)
    timer = Timer(args.device, args.repeat)
    b = batch
    mask = b.valid_mask
    gids = b.group_ids
    # verl's form: (N, L) advantages (the response's advantage on every valid token) and a bool mask
    t = b.replace(advantages=b.advantages.unsqueeze(1) * mask)
    adv_tok = t.advantages
    solve = build_component("scorer", "group_solve_rate").score(b)
    magnitude = build_component("scorer", "advantage_magnitude").score(b)
    probs = b.logprobs.exp()
    keep_half = torch.rand(b.n, generator=torch.Generator().manual_seed(1)).to(b.device) > 0.5
    ones = torch.ones(b.n, dtype=torch.bool, device=b.device)
    comp = lambda kind, name, **p: build_component(kind, name, **p)  # noqa: E731
    dfrl_mag = lambda: ref.dfrl_advantage_magnitude(adv_tok, mask)  # noqa: E731  (the reference reads (N, L) only)

    def as_trainer(keep):
        """DataFlex-RL's selectors return sorted kept indices; its trainer turns them into 0/1 weights."""
        weights = torch.zeros(keep.shape[0], device=keep.device)
        index = torch.as_tensor(sorted(torch.nonzero(keep).flatten().tolist()), dtype=torch.long, device=keep.device)
        if index.numel():
            weights[index] = 1.0
        return weights

    loop_mag = lambda: ref.advantage_magnitude(b.advantages, mask)  # noqa: E731
    loop_mag_tok = lambda: ref.advantage_magnitude(adv_tok, mask)  # noqa: E731

    # (label, group-level, core fn, per-group/per-row loop reference or None, DataFlex-RL's method or None)
    rows = [
        (
            "scorer group_solve_rate",
            True,
            lambda c=comp("scorer", "group_solve_rate"): c.score(b),
            lambda: ref.group_solve_rate(b.rewards, gids),
            lambda: ref.dfrl_group_solve_rate(b.rewards, gids),
        ),
        (
            "scorer group_reward_variance",
            True,
            lambda c=comp("scorer", "group_reward_variance"): c.score(b),
            lambda: ref.group_reward_variance(b.rewards, gids),
            None,
        ),
        (
            "scorer advantage_magnitude (N,)",
            False,
            lambda c=comp("scorer", "advantage_magnitude"): c.score(fresh(b)),
            loop_mag,
            dfrl_mag,
        ),
        (
            "scorer advantage_magnitude (N,L) bool",
            False,
            lambda c=comp("scorer", "advantage_magnitude"): c.score(fresh(t)),
            loop_mag_tok,
            dfrl_mag,
        ),
        (
            "scorer advantage_magnitude (N,L) sum",
            False,
            lambda c=comp("scorer", "advantage_magnitude", reduce="sum"): c.score(fresh(t)),
            lambda: ref.advantage_magnitude(adv_tok, mask, "sum"),
            lambda: ref.dfrl_advantage_magnitude(adv_tok, mask, "sum"),
        ),
        (
            "scorer advantage_magnitude (N,L) max",
            False,
            lambda c=comp("scorer", "advantage_magnitude", reduce="max"): c.score(fresh(t)),
            lambda: ref.advantage_magnitude(adv_tok, mask, "max"),
            lambda: ref.dfrl_advantage_magnitude(adv_tok, mask, "max"),
        ),
        (
            "scorer response_length",
            False,
            lambda c=comp("scorer", "response_length"): c.score(fresh(b)),
            lambda: loop_lengths(mask),
            None,
        ),
        (
            "scorer reward_efficiency",
            False,
            lambda c=comp("scorer", "reward_efficiency"): c.score(fresh(b)),
            lambda: torch.tensor([float(b.rewards[i]) / max(float(mask[i].sum()), 1.0) for i in range(b.n)]),
            None,
        ),
        ("scorer token_prob", False, lambda c=comp("scorer", "token_prob"): c.score(b), None, lambda: b.logprobs.exp()),
        ("scorer token_entropy", False, lambda c=comp("scorer", "token_entropy"): c.score(b), None, None),
        # The run-time refusal of non-finite scores (Part.score runs it on every score a part reads).
        ("score check (N,)", False, lambda: check_finite_scores(solve, mask, "bench"), None, None),
        ("score check (N,L) token_prob", False, lambda: check_finite_scores(probs, mask, "bench"), None, None),
        (
            "selector threshold_band",
            False,
            lambda c=comp("selector", "threshold_band", low=0.2, high=0.8): c.select(solve, b),
            lambda: ref.threshold_band(solve, 0.2, 0.8),
            lambda: as_trainer(ref.dfrl_threshold_band(solve, 0.2, 0.8)),
        ),
        (
            "selector topk_fraction",
            False,
            lambda c=comp("selector", "topk_fraction", fraction=0.5): c.select(magnitude, b),
            None,
            lambda: as_trainer(ref.topk_fraction(magnitude, 0.5)),
        ),
        # lengths are a cached batch property (one pass over the (N, L) mask, timed above as
        # response_length): both sides get them precomputed, so this row times the group selection.
        (
            "selector gfpo (k=3, efficiency)",
            True,
            lambda c=comp("selector", "gfpo", k=3): c.select(b.rewards, b),
            lambda: ref.gfpo(b.rewards, b.lengths, gids, 3, "efficiency"),
            None,
        ),
        (
            "selector max_variance (0.5)",
            True,
            lambda c=comp("selector", "max_variance"): c.select(b.rewards, b),
            lambda: ref.max_variance_loop(b.rewards, gids, 0.5),
            None,
        ),
        (
            "selector entropy_top_tokens (0.2)",
            False,
            lambda c=comp("selector", "entropy_top_tokens"): c.select(b.entropies, b),
            lambda: ref.top_tokens_by_sort(b.entropies, mask, 0.2),
            None,
        ),
        (
            "reweighter softmax",
            False,
            lambda c=comp("reweighter", "softmax"): c.weights(magnitude, b, mask=ones),
            lambda: ref.normalize(ref.softmax_raw(magnitude, ones, 1.0), ones),
            lambda: ref.dfrl_softmax(magnitude, 1.0),
        ),
        (
            "reweighter softmax per_group_mean_one",
            True,
            lambda c=comp("reweighter", "softmax", normalize="per_group_mean_one"): c.weights(
                magnitude, b, mask=keep_half
            ),
            lambda: ref.normalize(ref.softmax_raw(magnitude, keep_half, 1.0), keep_half, "per_group_mean_one", gids),
            None,
        ),
        (
            "reweighter difficulty_band",
            False,
            lambda c=comp("reweighter", "difficulty_band"): c.weights(solve, b, mask=ones),
            lambda: ref.normalize(ref.difficulty_band_raw(solve, ones, 0.25, 0.75, 2.0).to(b.device), ones),
            lambda: ref.dfrl_difficulty_band(solve, 0.25, 0.75, 2.0),
        ),
        (
            "reweighter reward_range",
            False,
            lambda c=comp("reweighter", "reward_range"): c.weights(solve, b, mask=ones),
            lambda: ref.normalize(ref.reward_range_raw(solve, 0.2, 0.8, 2.0, 1.0).to(b.device), ones),
            None,
        ),
        (
            "reweighter per_advantage",
            False,
            lambda c=comp("reweighter", "per_advantage"): c.weights(magnitude, b, mask=ones),
            lambda: ref.normalize(ref.per_advantage_raw(magnitude, 0.6), ones),
            lambda: ref.dfrl_per_advantage(magnitude, 0.6),
        ),
        (
            "reweighter advantage_reweight",
            False,
            lambda c=comp("reweighter", "advantage_reweight"): c.weights(probs, b),
            lambda: ref.normalize(ref.advantage_reweight_raw(probs, 0.3), mask),
            lambda: ref.dfrl_advantage_reweight(probs, mask, 0.3),
        ),
        (
            "normalize per_group_mean_one",
            True,
            lambda: normalize_weights(magnitude, keep_half, "per_group_mean_one", gids),
            lambda: ref.normalize(magnitude, keep_half, "per_group_mean_one", gids),
            None,
        ),
    ]

    def tracker_core():
        DomainTracker(DOMAINS).update(b, step=0, sync=False)

    def tracker_ref():
        ref.ReferenceTracker(DOMAINS, 50).update(
            b.rewards.tolist(), list(b.domains), 0, b.advantages.tolist(), gids.cpu()
        )

    rows.append(("DomainTracker.update", True, tracker_core, tracker_ref, None))
    tracker = DomainTracker(DOMAINS)
    for step in range(5):
        tracker.update(b, step=step, sync=False)
    for name in ("static", "reward_gap", "dump_ucb", "tscl", "learnability"):
        mixer = comp("mixer", name, domains=DOMAINS)
        rows.append((f"mixer {name}", False, lambda m=mixer: m.proportions(tracker), None, None))

    # Preset references: the component loop references (or DataFlex-RL's methods) composed as the preset is.
    def difffilter_loop():
        return ref.threshold_band(ref.group_solve_rate(b.rewards, gids), 0.2, 0.8)

    def difffilter_dfrl():
        return as_trainer(ref.dfrl_threshold_band(ref.dfrl_group_solve_rate(b.rewards, gids), 0.2, 0.8))

    def composite_loop(mag):
        keep = difffilter_loop().to(b.device)
        return ref.normalize(ref.softmax_raw(mag(), keep, 1.0), keep)

    def composite_dfrl():  # the reference has one mechanism per run: select, then reweight the kept rows
        keep = difffilter_dfrl() > 0
        weights = torch.zeros(b.n, device=keep.device)
        weights[keep] = ref.dfrl_softmax(dfrl_mag()[keep], 1.0)
        return weights

    preset_refs = {
        "difffilter": (difffilter_loop, difffilter_dfrl),
        "diffband": (
            lambda: ref.threshold_band(ref.group_reward_variance(b.rewards, gids), 0.0, float("inf")),
            lambda: as_trainer(ref.dfrl_threshold_band(ref.dfrl_group_solve_rate(b.rewards, gids), 0.0, 1.0)),
        ),
        "topk": (lambda m: ref.topk_fraction(m(), 0.5), lambda: as_trainer(ref.topk_fraction(dfrl_mag(), 0.5))),
        "maxvar": (
            lambda: ref.max_variance_loop(b.rewards, gids, 0.5),
            lambda: as_trainer(ref.max_variance_loop(b.rewards, gids, 0.5)),
        ),
        "gfpo": (
            lambda: ref.gfpo(b.rewards, loop_lengths(mask), gids, 3, "efficiency"),
            lambda: as_trainer(ref.dfrl_gfpo(b.rewards, mask, gids, 3, "efficiency")),
        ),
        "softmax": (
            lambda m: ref.normalize(ref.softmax_raw(m(), ones, 1.0), ones),
            lambda: ref.dfrl_softmax(dfrl_mag(), 1.0),
        ),
        "per": (
            lambda m: ref.normalize(ref.per_advantage_raw(m(), 0.6), ones),
            lambda: ref.dfrl_per_advantage(dfrl_mag(), 0.6),
        ),
        "ar": (
            lambda: ref.normalize(ref.advantage_reweight_raw(b.logprobs.exp(), 0.3), mask),
            lambda: ref.dfrl_advantage_reweight(b.logprobs.exp(), mask, 0.3),
        ),
        "entropy_top": (lambda: ref.top_tokens_by_sort(b.entropies, mask, 0.2), None),
    }
    reads_advantages = {"topk", "softmax", "per"}

    def add_apply(label, strategy, batch_, loop, dfrl):
        strategy.bind_domains(DOMAINS)
        steps = iter(range(10**9))
        rows.append(
            (label, False, lambda s=strategy, it=steps: s.apply(fresh(batch_), next(it), sync=False), loop, dfrl)
        )

    add_apply(
        "apply composite difffilter+softmax",
        build_strategy(COMPOSITE),
        b,
        lambda: composite_loop(loop_mag),
        composite_dfrl,
    )
    add_apply(
        "apply composite difffilter+softmax (N,L)",
        build_strategy(COMPOSITE),
        t,
        lambda: composite_loop(loop_mag_tok),
        composite_dfrl,
    )
    for preset in list_presets():
        loop, dfrl = preset_refs.get(preset, (None, None))
        if preset in reads_advantages:
            add_apply(f"apply preset {preset}", build_strategy(preset), b, lambda f=loop: f(loop_mag), dfrl)
            add_apply(
                f"apply preset {preset} (N,L) bool", build_strategy(preset), t, lambda f=loop: f(loop_mag_tok), dfrl
            )
        else:
            add_apply(f"apply preset {preset}", build_strategy(preset), b, loop, dfrl)

    print(
        f"device={args.device} N={args.n} group={args.group} L={args.length} threads={torch.get_num_threads()} "
        f"torch={torch.__version__}"
    )
    header = (
        f"{'component':44s} {'core ms':>9s} {'loop ref ms':>12s} {'speed-up':>9s} {'DataFlex-RL ms':>15s} "
        f"{'vs DataFlex-RL':>15s}"
    )
    print(header)
    print("-" * len(header))
    missed = []
    for label, group_level, core_fn, ref_fn, dfrl_fn in rows:
        if args.only and args.only not in label:
            continue
        core_ms = timer(core_fn)
        ref_ms = dfrl_ms = None
        if not args.no_reference:
            if ref_fn is not None:
                ref_ms = timer(ref_fn, repeat=args.ref_repeat, warmup=0)
            if dfrl_fn is not None:
                dfrl_ms = timer(dfrl_fn, repeat=max(3, args.ref_repeat), warmup=1)
        ratio = ref_ms / core_ms if ref_ms is not None and core_ms > 0 else None
        dfrl_ratio = dfrl_ms / core_ms if dfrl_ms is not None and core_ms > 0 else None
        cell = lambda v, fmt: fmt.format(v) if v is not None else "-"  # noqa: E731
        print(
            f"{label:44s} {core_ms:9.2f} {cell(ref_ms, '{:.1f}'):>12s} {cell(ratio, '{:.0f}x'):>9s} "
            f"{cell(dfrl_ms, '{:.2f}'):>15s} {cell(dfrl_ratio, '{:.1f}x'):>15s}",
            flush=True,
        )
        if ratio is not None and ratio < 20:
            missed.append(f"{label}: {ratio:.1f}x loop")
        if dfrl_ratio is not None and dfrl_ratio < 1:
            missed.append(f"{label}: {dfrl_ratio:.2f}x DataFlex-RL")
        if label.startswith("apply composite") and args.device == "cpu" and args.threads == 1 and core_ms >= 20:
            missed.append(f"{label}: {core_ms:.1f} ms >= 20 ms")
        if args.device.startswith("cuda") and group_level and not label.startswith("apply") and core_ms >= 3:
            missed.append(f"{label}: {core_ms:.2f} ms >= 3 ms on GPU")
    print(
        "targets (>= 20x the loop reference, >= 1x DataFlex-RL's method): "
        + ("all met" if not missed else "MISSED: " + "; ".join(missed))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
