"""Plain GRPO on the testbed over learning rates and prompts per step: which recipe reaches a high headline in the
fewest completions, with no level regressing (issue 47 point 1).

Each setting of prompts per step is one `dataflex compare` of the baseline strategy with ``--tune-learning-rates``
(the same seeds, budget and evaluation points for every rate); this script runs them (``--run``, resumable: a
finished run is kept) and reads their folders back into a table and one figure: the headline (held-out sampled
pass@1 on add3, sub3, sub4) against completions generated, mean over seeds, one line per (rate, prompts per step).

    python benchmarks/learning_rate_sweep.py --run --output-dir runs/lr_sweep \\
        --rates 1e-5,3e-5,1e-4,3e-4,1e-3 --prompts-per-step 16,32,8 --seeds 0-2 --budget completions:25600
    python benchmarks/learning_rate_sweep.py --output-dir runs/lr_sweep --figure docs/figures/testbed_lr_sweep.png

The table gives, per setting: the final headline (mean over seeds, Student-t 95%), the completions from which the
headline stays at or above each level (geometric mean over seeds; "> spent" where a seed never got there), and
each level's change from its start, paired by seed: a level is flagged as regressing when the paired interval of
its change lies below 0 (a drop larger than the seeds' noise). The headline collapses when its final value is below
its start.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys

import numpy as np

LEVELS = (0.80, 0.85, 0.88, 0.90)
"""Headline levels the table gives completions to reach."""


def run_sweep(args) -> None:
    """One `dataflex compare --strategies baseline --tune-learning-rates ...` per prompts-per-step setting."""
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    shared, swept = rates[0], rates[1:]
    for pps in args.prompts_per_step.split(","):
        folder = os.path.join(args.output_dir, f"pps{pps}")
        command = [
            sys.executable, "-m", "dataflex_callbacks.recipes.cli", "compare",
            "--strategies", "baseline", "--seeds", args.seeds, "--budget", args.budget,
            "--eval-points", str(args.eval_points), "--prompts-per-step", pps,
            "--learning-rate", shared, "--jobs", str(args.jobs), "--output-dir", folder,
        ]  # fmt: skip
        if swept:
            command += ["--tune-learning-rates", ",".join(swept)]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True)


def load_runs(output_dir: str) -> list[dict]:
    """Every finished run of the sweep: its result record, with its prompts per step."""
    runs = []
    for path in sorted(glob.glob(os.path.join(output_dir, "pps*", "runs", "*", "result.json"))):
        with open(path) as handle:
            record = json.load(handle)
        record["prompts_per_step"] = int(path.split(os.sep)[-4][3:])
        runs.append(record)
    if not runs:
        raise SystemExit(f"no finished run under {output_dir}/pps*/runs/: run this script with --run first")
    return runs


def cost_to_reach(curve: list[dict], level: float) -> float:
    """Completions from which the headline stays at or above `level` (last crossing, linear); NaN: never."""
    x = np.array([p["completions"] for p in curve], dtype=float)
    y = np.array([p["headline"] for p in curve], dtype=float)
    below = np.flatnonzero(y < level - 1e-12)
    if len(below) == 0:
        return float(x[0])
    last = below[-1]
    if last == len(y) - 1:
        return math.nan
    x0, x1, y0, y1 = x[last], x[last + 1], y[last], y[last + 1]
    return float(x0 + (level - y0) / (y1 - y0) * (x1 - x0))


def t_interval(values) -> tuple[float, float, float]:
    """Mean with its Student-t 95% interval (the library's `stats.mean_interval`)."""
    from dataflex_callbacks.recipes.compare.stats import mean_interval

    interval = mean_interval(list(values))
    return interval.mean, interval.low, interval.high


def sampled_levels(record: dict, when: str) -> dict[str, float]:
    """Per-level held-out sampled pass@1 of a run, before or after training."""
    sampled = record.get("sampled_pass_at_1") or {}
    return {k: v for k, v in (sampled.get(when) or {}).items() if k != "overall"}


def settings_table(runs: list[dict]) -> tuple[list[str], list[dict]]:
    """The markdown table's lines, and one summary per setting (prompts per step, rate)."""
    groups: dict[tuple[int, float], list[dict]] = {}
    for record in runs:
        groups.setdefault((record["prompts_per_step"], float(record["learning_rate"])), []).append(record)
    header = (
        "| prompts/step | learning rate | seeds | steps | final headline | "
        + " | ".join(f"to {level:.2f}" for level in LEVELS)
        + " | levels regressing (change, paired 95%) |"
    )
    lines = [header, "|" + "---|" * (6 + len(LEVELS))]
    summaries = []
    for (pps, rate), records in sorted(groups.items()):
        records.sort(key=lambda r: r["seed"])
        final = t_interval(r["headline"]["after"] for r in records)
        costs = {}
        for level in LEVELS:
            per_seed = [cost_to_reach(r["curve"], level) for r in records]
            spent = [r["completions"] for r in records]
            if all(not math.isnan(c) for c in per_seed):
                costs[level] = float(np.exp(np.mean(np.log(np.maximum(per_seed, 1.0)))))
            else:
                censored = [s if math.isnan(c) else c for c, s in zip(per_seed, spent, strict=True)]
                costs[level] = -float(np.exp(np.mean(np.log(np.maximum(censored, 1.0)))))  # negative: a bound
        regressing = []
        for level in sorted(sampled_levels(records[0], "before")):
            changes = [sampled_levels(r, "after")[level] - sampled_levels(r, "before")[level] for r in records]
            mean, low, high = t_interval(changes) if len(changes) > 1 else (changes[0], math.nan, math.nan)
            if high < 0:
                regressing.append(f"{level} {mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        collapsed = final[0] < float(np.mean([r["headline"]["before"] for r in records]))
        cells = [
            str(pps),
            f"{rate:g}",
            str(len(records)),
            str(max(r["steps"] for r in records)),
            f"{final[0]:.3f} [{final[1]:.3f}, {final[2]:.3f}]" + (" collapsed" if collapsed else ""),
            *(f"{c:,.0f}" if c >= 0 else f"> {-c:,.0f}" for c in costs.values()),
            "; ".join(regressing) or "none",
        ]
        lines.append("| " + " | ".join(cells) + " |")
        summaries.append(
            {"prompts_per_step": pps, "learning_rate": rate, "records": records, "costs": costs, "final": final}
        )
    return lines, summaries


def draw(summaries: list[dict], path: str) -> None:
    """Headline against completions, mean over seeds, one panel per prompts-per-step setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dataflex_callbacks.recipes.compare.reach import mean_curve

    settings = sorted({s["prompts_per_step"] for s in summaries})
    figure, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 4), sharey=True, squeeze=False)
    rates = sorted({s["learning_rate"] for s in summaries})
    colors = {rate: plt.get_cmap("viridis")(i / max(1, len(rates) - 1)) for i, rate in enumerate(rates)}
    for axis, pps in zip(axes[0], settings, strict=True):
        for summary in (s for s in summaries if s["prompts_per_step"] == pps):
            x, mean, _, _ = mean_curve(summary["records"])
            axis.plot(x, mean, color=colors[summary["learning_rate"]], label=f"lr {summary['learning_rate']:g}")
        axis.set_title(f"{pps} prompts x 8 completions a step")
        axis.set_xlabel("completions generated")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("headline: held-out sampled pass@1 (mean over seeds)")
    axes[0][-1].legend(loc="lower right")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    print(f"figure: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="runs/lr_sweep")
    parser.add_argument("--run", action="store_true", help="train the sweep's runs first (finished runs are kept)")
    parser.add_argument("--rates", default="1e-5,3e-5,1e-4,3e-4,1e-3", help="the first is the comparisons' own rate")
    parser.add_argument("--prompts-per-step", default="16,32,8")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--budget", default="completions:25600")
    parser.add_argument("--eval-points", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--figure", default=None, help="write the figure here (PNG)")
    args = parser.parse_args(argv)
    if args.run:
        run_sweep(args)
    lines, summaries = settings_table(load_runs(args.output_dir))
    print("\n".join(lines))
    if args.figure:
        draw(summaries, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
