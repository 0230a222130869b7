"""Compute to reach an accuracy level, the headline of a comparison's report.

GRESO, AR3PO and SPEED-RL report a data strategy's saving as the compute it needs to reach a target
accuracy, not as its accuracy at a fixed budget. The accuracy here is each run's headline (`held_out`: held-out
sampled pass@1 on the testbed's headline levels, or on every held-out prompt of the user's data; each curve
point's ``headline``). For each strategy this module measures the compute in
every unit (`AXES`: completions, optimizer steps, generated tokens, training seconds, trained tokens,
generation and update seconds, and with a `CostModel` the modelled cost) its runs needed to reach the baseline's
final headline on the same seed (each seed's own level, so the comparison is paired and the
baseline reaches its level in every seed) and, with ``--target``, a given value:
per seed on that seed's own curve (`cost_to_reach`), then over seeds and, paired by seed, as a ratio
to the baseline (`strategy_reach`). The method is written out in `stats`' docstring.

A strategy's saving shows in its own unit: dynamic sampling saves optimizer steps (each step generates
more), skipping saves completions. A result written before curve points recorded ``completion_tokens``
and ``wall_seconds`` (or ``trained_tokens``, ``generation_seconds`` and ``update_seconds``) has no such
unit to reach a level: those cells read "n/a (not recorded)". Every curve point has its ``step``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..held_out import LOGGED, headline_text
from . import stats
from .cost_model import MODELLED_COST, CostModel, with_modelled_cost

# Curve point field -> (what the report calls it, how a value is printed).
AXES = {
    "completions": ("completions", "{:.0f}"),
    "step": ("optimizer steps", "{:.0f}"),
    "completion_tokens": ("generated tokens", "{:.0f}"),
    "wall_seconds": ("training seconds", "{:.1f}"),
    "trained_tokens": ("trained tokens", "{:.0f}"),
    "generation_seconds": ("generation seconds", "{:.1f}"),
    "update_seconds": ("update seconds", "{:.1f}"),
    MODELLED_COST: ("modelled cost", "{:.0f}"),
}
HEADLINE_AXES = ("completions", "step", "completion_tokens", "wall_seconds")
"""The headline's first table per level; `more_axes` gives its second."""
CONSOLE_AXES = ("completions", "step")
"""The units the console's headline prints."""


def more_axes(cost_model: CostModel | None = None) -> tuple[str, ...]:
    """The units of the headline's second table per level: trained tokens, generation and update seconds, and the
    modelled cost when there is a cost model."""
    return ("trained_tokens", "generation_seconds", "update_seconds") + ((MODELLED_COST,) if cost_model else ())


def runs_by_seed(records: list[dict], strategy: str) -> dict[int, dict]:
    """The result records of `strategy`, by seed."""
    return {r["seed"]: r for r in records if r["strategy"] == strategy}


def cost_to_reach(costs, accuracy, level: float) -> float:
    """Cost (completions, tokens, seconds) from which an accuracy curve stays at or above ``level``: its last
    crossing from below (linear between evaluation points); NaN if it ends below. Curves of RL runs often dip
    before they climb, so the first point above ``level`` (often the starting one) would say little."""
    x, y = np.asarray(costs, dtype=float), np.asarray(accuracy, dtype=float)
    below = np.flatnonzero(y < level - 1e-12)
    if len(below) == 0:
        return float(x[0])
    i = int(below[-1])
    if i == len(y) - 1:
        return math.nan
    return float(x[i] + (level - y[i]) / (y[i + 1] - y[i]) * (x[i + 1] - x[i]))


def recorded(runs: list[dict], axis: str) -> bool:
    """Whether every curve point of `runs` has `axis`
    (results written before tokens and seconds were recorded lack them)."""
    return all(isinstance(point.get(axis), (int, float)) for run in runs for point in run["curve"])


def headline_value(point: dict) -> float:
    """A curve point's headline (`held_out.HeldOutScores.curve_fields`)."""
    return float(point["headline"])


def logged_headline(records: list[dict]) -> bool:
    """Whether the runs' headline is the accuracy a user's training function logged (``run.log``), so dataflex ran
    no evaluation of its own (no greedy accuracy, no sampled pass@1) and timed only the function as a whole."""
    return bool(records) and all(r["headline"]["metric"] == LOGGED for r in records)


def headline_description(records: list[dict]) -> str:
    """What the runs' headline measures (`held_out.headline_text`), per seed where the runs' headlines differ:
    ``held-out sampled pass@1 (k=4, T=1) on add2, add3 (100 prompts)``."""
    seeds: dict[str, set] = {}
    for record in records:
        seeds.setdefault(headline_text(record["headline"]), set()).add(record["seed"])
    if len(seeds) == 1:
        return next(iter(seeds))
    return "; ".join(f"seed {', '.join(str(s) for s in sorted(found))}: {text}" for text, found in seeds.items())


def seed_cost_to_reach(record: dict, level: float, axis: str = "completions") -> float | None:
    """`cost_to_reach` on one run's own headline curve:
    NaN when it ends below `level`, None when `axis` is not recorded."""
    if not recorded([record], axis):
        return None
    curve = record["curve"]
    return cost_to_reach([p[axis] for p in curve], [headline_value(p) for p in curve], level)


def mean_curve(runs: list[dict], axis: str = "completions", value: Callable[[dict], float] = headline_value):
    """(mean `axis` value, mean of `value` (a curve point's figure; default its headline), low, high) at each
    evaluation point, averaged over seeds."""
    length = min(len(r["curve"]) for r in runs)
    x = np.array([[r["curve"][i][axis] for i in range(length)] for r in runs], dtype=float).mean(axis=0)
    intervals = [stats.accuracy_interval([value(r["curve"][i]) for r in runs]) for i in range(length)]
    return x, [iv.mean for iv in intervals], [iv.low for iv in intervals], [iv.high for iv in intervals]


@dataclass
class StrategyReach:
    """One strategy's cost to reach one level on one axis: per seed, over seeds, and paired with the baseline.

    A seed whose curve ends below the level is censored: it needs more than its run spent (`spent`), and is shown as
    "> spent" (a lower bound), never left out.

    Attributes:
        per_seed: seed -> cost (NaN: that seed's curve ends below the level); empty when `axis` is not recorded.
        spent: seed -> what the run spent in `axis` by its end, the lower bound of a censored seed's cost.
        interval: mean over seeds with its Student-t 95% interval; None unless every seed reached the level.
        ratio: geometric-mean ratio to the baseline with its paired 95% interval; None when there is none.
        ratio_bound: ``""`` (every pair reached the level), ``"lower"`` (the strategy did not in some seeds: the
            ratio and its interval's low end are lower bounds, its high end is unknown) or ``"upper"`` (the baseline
            did not: the ratio and its interval's high end are upper bounds).
        censored_pairs: the seeds whose pair has one side censored (the bound's reason).
        ratio_note: why `ratio` is None ("" when it is not, or for the baseline itself).
    """

    strategy: str
    axis: str
    per_seed: dict[int, float] = field(default_factory=dict)
    spent: dict[int, float] = field(default_factory=dict)
    recorded: bool = True
    interval: stats.Interval | None = None
    ratio: stats.Interval | None = None
    ratio_bound: str = ""
    censored_pairs: list[int] = field(default_factory=list)
    ratio_note: str = ""

    @property
    def reached(self) -> int:
        return sum(1 for v in self.per_seed.values() if not math.isnan(v))

    @property
    def censored(self) -> list[int]:
        """The seeds whose curve ends below the level (their cost is more than `spent`)."""
        return [s for s, v in self.per_seed.items() if math.isnan(v)]

    def bounded(self) -> dict[int, float]:
        """seed -> cost, a censored seed's replaced by what its run spent (a lower bound of it)."""
        return {s: self.spent[s] if math.isnan(v) else v for s, v in self.per_seed.items()}


Level = "float | dict[int, float]"
"""An accuracy level: one for every seed, or one per seed (seed -> level)."""


def level_of(level, seed: int) -> float:
    """The level `seed` must reach: the seed's own where `level` maps seeds to levels, else `level`."""
    if isinstance(level, dict):
        return float(level.get(seed, math.nan))
    return float(level)


def level_text(level) -> str:
    """`0.625`, or for per-seed levels their mean and range: `0.625 (per seed: 0.500-0.750)`."""
    if not isinstance(level, dict):
        return f"{level:.3f}"
    values = list(level.values())
    if min(values) == max(values):
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} (per seed: {min(values):.3f}-{max(values):.3f})"


def spent_on(record: dict, axis: str) -> float:
    """What a run spent in `axis` by its end (its last curve point): a censored seed needs more than this."""
    return float(record["curve"][-1][axis])


def strategy_reach(
    records: list[dict], strategy: str, baseline: str, level, axis: str = "completions"
) -> StrategyReach | None:
    """How much `axis` each seed of `strategy` needed to reach `level` (one level, or seed -> level), and the
    paired ratio to `baseline` (`paired_reach`); None when `strategy` has no runs."""
    runs = runs_by_seed(records, strategy)
    if not runs:
        return None
    reach = StrategyReach(strategy, axis, recorded=recorded(list(runs.values()), axis))
    if not reach.recorded:
        reach.ratio_note = "not recorded"
        return reach
    reach.per_seed = {seed: seed_cost_to_reach(run, level_of(level, seed), axis) for seed, run in sorted(runs.items())}
    reach.spent = {seed: spent_on(run, axis) for seed, run in sorted(runs.items())}
    if reach.reached == len(reach.per_seed):
        reach.interval = stats.mean_interval(list(reach.per_seed.values())).clipped(0.0, math.inf)  # no cost < 0
    if strategy == baseline:
        return reach
    base_runs = runs_by_seed(records, baseline)
    seeds = sorted(set(runs) & set(base_runs))
    if not seeds:
        reach.ratio_note = "no baseline run of the same seed"
    elif not recorded([base_runs[s] for s in seeds], axis):
        reach.ratio_note = "not recorded for the baseline"
    else:
        base = strategy_reach(records, baseline, baseline, level, axis)
        paired_reach(reach, base, seeds)
    return reach


def paired_reach(reach: StrategyReach, base: StrategyReach, seeds: list[int]) -> None:
    """Set `reach`'s paired ratio to the baseline's `base` over `seeds`.

    A pair whose one side never reached the level enters with what that run spent in its place, so the ratio is a
    bound (`StrategyReach.ratio_bound`): a lower bound when the strategy's run is censored, an upper bound when the
    baseline's is. Where both are censored in a seed, or censored pairs point both ways, no bound holds and the
    ratio is None, saying which seeds."""
    ours, theirs = set(reach.censored) & set(seeds), set(base.censored) & set(seeds)
    neither = sorted(ours & theirs)
    if neither:
        reach.ratio_note = f"neither reached it within the budget in seed {_seeds(neither)}: no bound on the ratio"
        return
    if ours and theirs:
        reach.ratio_note = (
            f"censored both ways: the strategy did not reach it in seed {_seeds(sorted(ours))}, the baseline in "
            f"seed {_seeds(sorted(theirs))}"
        )
        return
    top, bottom = reach.bounded(), base.bounded()
    ratio = stats.paired_ratio_interval([top[s] for s in seeds], [bottom[s] for s in seeds])
    if math.isnan(ratio.mean):
        reach.ratio_note = "one of a pair reached it at the start, the other later"
        return
    reach.ratio = ratio
    reach.ratio_bound = "lower" if ours else "upper" if theirs else ""
    reach.censored_pairs = sorted(ours | theirs)


def _seeds(seeds: list[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def reach_levels(records: list[dict], baseline: str, target: float | None) -> list[tuple[str, object]]:
    """The levels of the headline, named: the baseline's final headline on each seed (seed -> level), then
    `target`."""
    levels = []
    base_runs = runs_by_seed(records, baseline)
    if base_runs:
        levels.append(
            (
                "the baseline's final accuracy on the same seed",
                {seed: float(r["headline"]["after"]) for seed, r in sorted(base_runs.items())},
            )
        )
    if target is not None:
        levels.append(("the target", float(target)))
    return levels


CSV_LEVELS = {"the baseline's final accuracy on the same seed": "baseline_final", "the target": "target"}
"""results.csv's short name of each level of `reach_levels`."""


def reach_columns(records: list[dict], baseline: str, target: float | None) -> dict[str, dict]:
    """results.csv's compute-to-reach cells, run name -> column -> value: per level (`CSV_LEVELS`) and unit of
    `CONSOLE_AXES`, ``reach_<level>_<unit>`` (the cost, or for a censored run what it spent: a lower bound) and
    ``reach_<level>_censored`` (True: the run never reached the level, so its cost is more than the figure)."""
    cells: dict[str, dict] = {r["name"]: {} for r in records}
    for name, level in reach_levels(records, baseline, target):
        key = f"reach_{CSV_LEVELS[name]}"
        for record in records:
            level_here = level_of(level, record["seed"])
            row = cells[record["name"]]
            row[f"{key}_censored"] = None if math.isnan(level_here) else False
            for axis in CONSOLE_AXES:
                cost = seed_cost_to_reach(record, level_here, axis) if not math.isnan(level_here) else None
                if cost is not None and math.isnan(cost):
                    cost, row[f"{key}_censored"] = spent_on(record, axis), True
                row[f"{key}_{axis}"] = cost
    return cells


def reach_column_names(target: float | None) -> list[str]:
    """The columns of `reach_columns`, in results.csv's order."""
    keys = ["baseline_final"] + (["target"] if target is not None else [])
    return [f"reach_{key}_{suffix}" for key in keys for suffix in (*CONSOLE_AXES, "censored")]


def _value(number: float, axis: str) -> str:
    return AXES[axis][1].format(number)


def reach_cell(reach: StrategyReach) -> str:
    """A strategy's cost to reach a level: `mean [low, high]`; with censored seeds (not reached by the run's end) a
    lower bound, `> mean (per seed: 0: 300, 1: > 400)`; or why not known."""
    if not reach.recorded:
        return "n/a (not recorded)"
    n, k = len(reach.per_seed), reach.reached
    if k < n:
        bounded = reach.bounded()
        shown = ", ".join(
            f"{s}: " + (f"> {_value(bounded[s], reach.axis)}" if math.isnan(v) else _value(v, reach.axis))
            for s, v in reach.per_seed.items()
        )
        mean = _value(float(np.mean(list(bounded.values()))), reach.axis)
        return f"> {mean} (not reached in {n - k} of {n} seeds; per seed: {shown})"
    interval = reach.interval
    if interval.n < 2:
        return f"{_value(interval.mean, reach.axis)} (interval n/a: needs >= 2 seeds)"
    return " ".join(
        [
            _value(interval.mean, reach.axis),
            f"[{_value(interval.low, reach.axis)}, {_value(interval.high, reach.axis)}]",
        ]
    )


def ratio_cell(reach: StrategyReach, baseline: str) -> str:
    """A strategy's paired ratio to the baseline: `0.62 [0.41, 0.93]`; a bound where one side of a pair was censored,
    `> 1.30 [1.05, inf) (lower bound: ...)`; or why there is none."""
    if reach.strategy == baseline:
        return "1 (reference)"
    ratio = reach.ratio
    if ratio is None:
        return f"n/a ({reach.ratio_note})"
    who = "the strategy" if reach.ratio_bound == "lower" else "the baseline"
    why = f"{who} not reached in seed {_seeds(reach.censored_pairs)}"  # the section's text says what a bound means
    if ratio.n < 2:
        mean = f"{ratio.mean:.2f}"
        if reach.ratio_bound:
            return f"{'>' if reach.ratio_bound == 'lower' else '<'} {mean} ({reach.ratio_bound} bound: {why})"
        return f"{mean} (interval n/a: needs >= 2 seeds)"
    if reach.ratio_bound == "lower":
        return f"> {ratio.mean:.2f} [{ratio.low:.2f}, inf) (lower bound: {why})"
    if reach.ratio_bound == "upper":
        return f"< {ratio.mean:.2f} [0, {ratio.high:.2f}] (upper bound: {why})"
    return f"{ratio.mean:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]"


def _reach_table(records: list[dict], strategies: list[str], baseline: str, level, axes) -> list[str]:
    """Markdown lines: per strategy, the cost to reach `level` in each of `axes`, and its ratio to the baseline."""
    header = ["strategy"]
    for axis in axes:
        header += [AXES[axis][0], "x baseline"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for strategy in strategies:
        cells = [f"`{strategy}`"]
        for axis in axes:
            reach = strategy_reach(records, strategy, baseline, level, axis)
            if reach is None:
                break
            cells += [reach_cell(reach), ratio_cell(reach, baseline)]
        else:
            out.append("| " + " | ".join(cells) + " |")
    return out


def headline_section(
    records: list[dict],
    strategies: list[str],
    baseline: str,
    target: float | None,
    unavailable: str | None = None,
    cost_model: CostModel | None = None,
) -> list[str]:
    """The report's first section, "Compute to reach the target": two tables per level (markdown lines), the
    first in `HEADLINE_AXES`, the second in `more_axes` (the modelled cost of `cost_model` among them).

    `unavailable` replaces the tables with its reason (e.g. every accuracy is the same number).
    """
    records = with_modelled_cost(records, cost_model)
    out = ["## Compute to reach the target", ""]
    levels = reach_levels(records, baseline, target)
    if unavailable or not levels:
        return out + [f"n/a: {unavailable or 'no baseline runs and no --target'}.", ""]
    out += [
        f"This section is the headline answer; accuracy here is the headline, {headline_description(records)}. "
        "Per seed, on its own headline curve (linear between "
        "evaluation points): the compute from which the curve stays at or above the level (0: it never fell "
        "below, the untrained model already had it). A seed whose curve ends below the level is censored: it "
        "needs more than its run spent, shown as `> spent`. Cells: mean over seeds [Student-t 95% interval] when "
        "every seed reached the level; otherwise `> mean`, the mean with each censored seed counted at what it "
        "spent (a lower bound), and every seed's figure. "
        f"`x baseline`: per seed strategy / `{baseline}`, geometric mean [paired 95% interval], below 1 when "
        "the strategy needs less. Where one run of a pair is censored it enters at what it spent, so the ratio is "
        "a bound: `> r [low, inf)` when the strategy's run is censored (the ratio and the interval's low end are "
        "lower bounds, its high end unknown), `< r [0, high]` when the baseline's is; with both censored in a seed "
        "there is no bound (n/a), and the verdict never counts a bound as a saving. "
        + seconds_text(records)
        + " A strategy's saving shows in its own unit: dynamic sampling saves optimizer steps, skipping saves "
        "completions, filtering after generation saves trained tokens.",
        "",
    ]
    for name, level in levels:
        out += [f"### {name[0].upper()}{name[1:]}: {level_text(level)}", ""]
        out += _reach_table(records, strategies, baseline, level, HEADLINE_AXES)
        out += ["", "In the other units:", ""]
        out += _reach_table(records, strategies, baseline, level, more_axes(cost_model))
        out.append("")
    return out


def seconds_text(records: list[dict]) -> str:
    """What the report's "training seconds" of `records` are: TRL runs' exclude held-out evaluation; a training
    function's are its whole wall time up to each ``run.log``."""
    if logged_headline(records):
        return (
            "Training seconds are the wall time of your training function from its call to each run.log, so they "
            "include all it does besides training (building its model and data, its own held-out evaluations: the "
            "first point's seconds are its set-up and first evaluation); generation and update seconds are not "
            "measured (n/a)."
        )
    return (
        "Training seconds exclude held-out evaluation; they are generation seconds plus update seconds (second table)."
    )


def headline_console(records: list[dict], strategies: list[str], baseline: str, target: float | None) -> list[str]:
    """The console's headline: per strategy, the completions, then the optimizer steps (`CONSOLE_AXES`) to reach each
    level, with the ratio to the baseline."""
    lines = []
    for axis in CONSOLE_AXES:
        for name, level in reach_levels(records, baseline, target):
            lines.append(
                f"{AXES[axis][0]} to reach {name} ({level_text(level)}), mean over seeds [95% interval], "
                "x baseline paired by seed:"
            )
            for strategy in strategies:
                reach = strategy_reach(records, strategy, baseline, level, axis)
                if reach is None:
                    continue
                ratio = "" if strategy == baseline else f"; x baseline: {ratio_cell(reach, baseline)}"
                lines.append(f"  {strategy:<16} {reach_cell(reach)}{ratio}")
    return lines


def reach_table(records: list[dict], strategies: list[str], baseline: str) -> tuple[float, list[str]]:
    """The baseline's final mean headline, and markdown rows: completions each strategy's seed-mean headline curve
    needs to reach it (none without baseline runs).

    The baseline's own row is where its mean curve reached that level for good, the reference of the ratio.
    """
    base_runs = list(runs_by_seed(records, baseline).values())
    if not base_runs:
        return math.nan, []
    x, y, _, _ = mean_curve(base_runs)
    level = float(y[-1])
    reference = cost_to_reach(x, y, level)
    rows = ["| strategy | completions to reach | share of the baseline's |", "|---|---|---|"]
    for strategy in strategies:
        runs = list(runs_by_seed(records, strategy).values())
        if not runs:
            continue
        sx, sy, _, _ = mean_curve(runs)
        reach = cost_to_reach(sx, sy, level)
        cells = [
            "never" if math.isnan(reach) else f"{reach:.0f}",
            "-" if math.isnan(reach) or not reference else f"{reach / reference:.2f}",
        ]
        rows.append(f"| `{strategy}` | " + " | ".join(cells) + " |")
    return level, rows
