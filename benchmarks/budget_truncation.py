"""Would a shorter comparison budget show a saving? Re-read finished comparisons as if their budget had been smaller.

The testbed trains at a constant learning rate (`recipes/runner.py`: no schedule, no warm-up), so the first ``B``
completions of a run are what a run of budget ``B`` trains. For each budget ``B`` this reads every seed of
``--folders`` (comparison output folders, each with ``runs/<strategy>-seed<N>/result.json``) as a comparison of
budget ``B``: plain GRPO's final headline is its curve's last point at or before ``B``, and each run's cost to reach
it is `reach.cost_to_reach` on the curve cut at ``B`` (the last crossing from below, as `dataflex compare` reports
it). Printed per budget: plain GRPO's gain over its last third (is it still rising?) and the strategy's ratio per seed.

    python benchmarks/budget_truncation.py --folders runs/ks,runs/fresh_k5 --strategy knapsack
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from dataflex_callbacks.recipes.compare.reach import cost_to_reach, runs_by_seed
from dataflex_callbacks.recipes.compare.results import RESULT_FILE


def cut(curve: list[dict], budget: float) -> tuple[list[float], list[float]]:
    """(completions, headline) of the curve points at or before ``budget`` completions."""
    points = [p for p in curve if p["completions"] <= budget + 1e-9]
    return [float(p["completions"]) for p in points], [float(p["headline"]) for p in points]


def at_budget(baseline: dict, run: dict, budget: float) -> tuple[float, float]:
    """(plain GRPO's gain over its last third, the run's cost to plain GRPO's final x plain GRPO's; NaN: never)."""
    x, y = cut(baseline["curve"], budget)
    final = y[-1]
    third = [h for n, h in zip(x, y, strict=True) if n <= budget * 2 / 3 + 1e-9][-1]
    ours_x, ours_y = cut(run["curve"], budget)
    ours, theirs = cost_to_reach(ours_x, ours_y, final), cost_to_reach(x, y, final)
    return final - third, ours / theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folders", required=True, help="comparison output folders, comma-separated")
    parser.add_argument("--strategy", required=True, help="the strategy to read against plain GRPO ('baseline')")
    parser.add_argument("--budgets", default="25600,19200,16000,12800,9600", help="completions, comma-separated")
    parser.add_argument("--goal", type=float, default=0.67, help="the ratio a seed must reach (issue 47: 0.67)")
    args = parser.parse_args()
    pairs = []
    for folder in args.folders.split(","):
        records = [json.loads(path.read_text()) for path in Path(folder, "runs").glob(f"*/{RESULT_FILE}")]
        ours, theirs = runs_by_seed(records, args.strategy), runs_by_seed(records, "baseline")
        pairs += [(str(seed), theirs[seed], ours[seed]) for seed in sorted(set(ours) & set(theirs))]
    if not pairs:
        raise SystemExit(f"no seed of {args.strategy!r} with a 'baseline' run of the same seed in {args.folders}")
    print(f"{args.strategy} x plain GRPO to plain GRPO's final, seeds {', '.join(s for s, _, _ in pairs)}")
    print("| budget | plain GRPO's gain over its last third | ratio per seed | seeds at or below the goal |")
    print("|---|---|---|---|")
    for budget in (float(b) for b in args.budgets.split(",")):
        gains, ratios = zip(*(at_budget(base, run, budget) for _, base, run in pairs), strict=True)
        shown = ", ".join("never" if math.isnan(r) else f"{r:.2f}" for r in ratios)
        met = sum(1 for r in ratios if not math.isnan(r) and r <= args.goal)
        print(f"| {budget:,.0f} | {min(gains):+.3f} to {max(gains):+.3f} | {shown} | {met} of {len(ratios)} |")


if __name__ == "__main__":
    main()
