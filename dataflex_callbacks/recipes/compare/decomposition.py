"""Where a saving comes from: completions to reach a level = (completions per optimizer step) x (steps to reach it).

A strategy that refills each step to a fixed batch generates at least as much per step as the baseline, so it can
only win on the second factor; one that skips or screens without refilling can win on the first. For each strategy
and level of the headline (`reach.reach_levels`), per seed and paired with the baseline's run of the same seed:

- **per-step cost**: the strategy's completions per optimizer step over the baseline's, each run's completions over
  its steps *up to the level* (both read at the same crossing of its headline curve, `reach.seed_cost_to_reach` on
  the axes ``completions`` and ``step``). Up to the level, not over the whole run: then the two factors multiply to
  the completions ratio exactly, per seed, and the steps after the crossing (which may cost differently: dynamic
  sampling needs more rounds as groups get solved) do not enter a figure about reaching it. A censored run (its
  curve ends below the level) has no crossing: its figure is over its whole run, the same completions and steps
  its bounds below are made of. A run that had the level from its start took no step to it: no per-step cost.
- **step reduction**: the strategy's steps to the level over the baseline's (`reach.strategy_reach` on ``step``);
  a censored run enters at the steps it took, so the ratio is a bound (``>``: the strategy's run is censored,
  ``<``: the baseline's), never a saving.
- **completions**: the ratio of `reach.strategy_reach` on ``completions``, the first section's ``x baseline``.

Per seed, per-step cost x step reduction = completions ratio (`SeedFactors`); over seeds each is a geometric mean,
so the geometric means multiply too (`Decomposition.product`). With ``--tune-learning-rates`` the same split is
made against plain GRPO at the sweep's fastest rate (`tuned_decomposition_section`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import stats
from .reach import (
    CSV_LEVELS,
    StrategyReach,
    level_text,
    ratio_cell,
    reach_levels,
    strategy_reach,
)
from .tuning import sweep_records, tuned_levels

STEP_AXIS = "step"
COMPLETIONS_AXIS = "completions"


@dataclass
class SeedFactors:
    """One seed's pair: the strategy's per-step cost, steps and completions to the level, each over the baseline's.

    Attributes:
        step_cost: completions per step over the baseline's (NaN: a run took no step to the level).
        steps: steps to the level over the baseline's, a censored run at the steps it took.
        completions: completions to the level over the baseline's, a censored run at what it spent.
        bound: ``""``, ``"lower"`` (the strategy's run is censored: `steps` and `completions` are lower bounds),
            ``"upper"`` (the baseline's is) or ``"none"`` (both are: no bound).
    """

    step_cost: float
    steps: float
    completions: float
    bound: str = ""


@dataclass
class Decomposition:
    """One strategy's completions to reach one level against the baseline, as per-step cost x step reduction.

    Attributes:
        completions: the strategy's completions to the level, paired with the baseline (`reach.StrategyReach`).
        steps: the same in optimizer steps.
        per_seed: seed -> `SeedFactors`, the seeds both the strategy and the baseline ran.
        step_cost: geometric-mean per-step cost ratio with its paired 95% interval; None when there is none.
        step_cost_note: why `step_cost` is None.
    """

    strategy: str
    completions: StrategyReach
    steps: StrategyReach
    per_seed: dict[int, SeedFactors] = field(default_factory=dict)
    step_cost: stats.Interval | None = None
    step_cost_note: str = ""

    def product(self) -> float:
        """Geometric-mean per-step cost x geometric-mean step reduction: the geometric-mean completions ratio
        (`completions.ratio`); NaN where either factor has no figure."""
        if self.step_cost is None or self.steps.ratio is None:
            return math.nan
        return self.step_cost.mean * self.steps.ratio.mean


def _per_step(completions: float, steps: float) -> float:
    return completions / steps if steps > 0 else math.nan


def _bound(ours_censored: bool, theirs_censored: bool) -> str:
    if ours_censored and theirs_censored:
        return "none"
    return "lower" if ours_censored else "upper" if theirs_censored else ""


def _ratio(top: float, bottom: float) -> float:
    if bottom == 0:
        return 1.0 if top == 0 else math.nan
    return top / bottom


def decompose(records: list[dict], strategy: str, baseline: str, level) -> Decomposition | None:
    """`strategy`'s completions to reach `level` (one level, or seed -> level) against `baseline`, paired by seed,
    as per-step cost x step reduction; None when `strategy` has no runs."""
    completions = strategy_reach(records, strategy, baseline, level, COMPLETIONS_AXIS)
    steps = strategy_reach(records, strategy, baseline, level, STEP_AXIS)
    if completions is None or steps is None:
        return None
    found = Decomposition(strategy, completions, steps)
    base_completions = strategy_reach(records, baseline, baseline, level, COMPLETIONS_AXIS)
    base_steps = strategy_reach(records, baseline, baseline, level, STEP_AXIS)
    if base_completions is None or base_steps is None:
        found.step_cost_note = "no baseline runs"
        return found
    seeds = sorted(set(completions.per_seed) & set(base_completions.per_seed))
    if not seeds:
        found.step_cost_note = "no baseline run of the same seed"
        return found
    ours_c, ours_t = completions.bounded(), steps.bounded()
    theirs_c, theirs_t = base_completions.bounded(), base_steps.bounded()
    ours_rate = {s: _per_step(ours_c[s], ours_t[s]) for s in seeds}
    theirs_rate = {s: _per_step(theirs_c[s], theirs_t[s]) for s in seeds}
    for s in seeds:
        found.per_seed[s] = SeedFactors(
            _ratio(ours_rate[s], theirs_rate[s]),
            _ratio(ours_t[s], theirs_t[s]),
            _ratio(ours_c[s], theirs_c[s]),
            _bound(s in completions.censored, s in base_completions.censored),
        )
    at_start = [s for s in seeds if math.isnan(ours_rate[s]) or math.isnan(theirs_rate[s])]
    if at_start:
        found.step_cost_note = f"a run had the level from its start (no step to it) in seed {_seeds(at_start)}"
        return found
    found.step_cost = stats.paired_ratio_interval([ours_rate[s] for s in seeds], [theirs_rate[s] for s in seeds])
    return found


def _seeds(seeds: list[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def step_cost_cell(found: Decomposition, baseline: str) -> str:
    """The per-step cost ratio: `0.55 [0.48, 0.63]`, or why there is none. Never a bound: a censored run's per-step
    cost is measured over its whole run."""
    if found.strategy == baseline:
        return "1 (reference)"
    ratio = found.step_cost
    if ratio is None:
        return f"n/a ({found.step_cost_note})"
    if ratio.n < 2:
        return f"{ratio.mean:.2f} (interval n/a: needs >= 2 seeds)"
    return f"{ratio.mean:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]"


def _bounded_text(value: float, bound: str) -> str:
    if math.isnan(value) or bound == "none":
        return "n/a"
    return {"lower": "> ", "upper": "< "}.get(bound, "") + f"{value:.2f}"


def seed_factors_text(found: Decomposition) -> str:
    """Each seed's per-step cost x step reduction = completions ratio: `0: 0.50 x 0.40 = 0.20, 1: 0.50 x > 0.90 =
    > 0.45` (a bound where a run of the pair is censored; n/a where both are)."""
    parts = []
    for seed, factors in found.per_seed.items():
        cost = "n/a" if math.isnan(factors.step_cost) else f"{factors.step_cost:.2f}"
        steps = _bounded_text(factors.steps, factors.bound)
        parts.append(f"{seed}: {cost} x {steps} = {_bounded_text(factors.completions, factors.bound)}")
    return ", ".join(parts)


def decomposition_table(
    records: list[dict], strategies: list[str], baseline: str, level, versus: str = "x baseline"
) -> list[str]:
    """Markdown lines: per strategy but `baseline`, its per-step cost, step reduction and completions to reach
    `level`, each over `baseline`'s (the columns say `versus`), and every seed's product."""
    out = [
        f"| strategy | completions per step ({versus}) | steps to level ({versus}) | "
        f"completions to level ({versus}) | per seed: per-step cost x steps = completions |",
        "|---|---|---|---|---|",
    ]
    for strategy in strategies:
        found = None if strategy == baseline else decompose(records, strategy, baseline, level)
        if found is None:
            continue
        cells = [
            step_cost_cell(found, baseline),
            ratio_cell(found.steps, baseline),
            ratio_cell(found.completions, baseline),
            seed_factors_text(found),
        ]
        out.append(f"| `{strategy}` | " + " | ".join(cells) + " |")
    return out


def decomposition_section(
    records: list[dict], strategies: list[str], baseline: str, target: float | None, unavailable: str | None = None
) -> list[str]:
    """The end of report.md's "Compute to reach the target": per level, each strategy's completions ratio as per-step
    cost x step reduction (markdown lines); [] when the section has no tables (`unavailable`, no levels)."""
    levels = reach_levels(records, baseline, target)
    if unavailable or not levels or all(s == baseline for s in strategies):
        return []
    out = [
        "### Per-step cost x step reduction",
        "",
        "Completions to reach a level = (completions per optimizer step) x (steps to reach it); a strategy that "
        "refills each step to a fixed batch can only win on the second factor. Per seed against "
        f"`{baseline}`'s run of the same seed: `completions per step` is each run's completions over its steps up "
        "to the level (both read at the same crossing, so the factors multiply exactly; a run censored at the "
        "level counts its whole run, and this factor is never a bound), `steps to level` and `completions to "
        "level` are the first section's ratios (a bound, `>` or `<`, where a run of a pair is censored). Each "
        "column is a geometric mean over seeds [paired 95% interval], so per-step cost x steps = completions "
        "holds for the means as it does for every seed (last column).",
        "",
    ]
    for name, level in levels:
        out += [f"**{name[0].upper()}{name[1:]}: {level_text(level)}**", ""]
        out += decomposition_table(records, strategies, baseline, level)
        out.append("")
    return out


def tuned_decomposition_section(settings, records: list[dict], tuned: list[dict], unavailable: str | None = None):
    """The end of report.md's "Against the tuned baseline": per level, each strategy (and plain GRPO at the shared
    rate) as per-step cost x step reduction against the sweep's fastest learning rate (`tuning.tuned_levels`), paired
    by seed with that rate's runs (markdown lines); [] without ``--tune-learning-rates``."""
    levels = tuned_levels(settings, records, tuned)
    if unavailable or not levels:
        return []
    combined, _ = sweep_records(settings, records, tuned)
    out = [
        "### Per-step cost x step reduction against the tuned baseline",
        "",
        "As at the end of the first section, against plain GRPO at the fastest learning rate of the level instead "
        f"of `{settings.baseline}` at the shared rate: a faster rate saves steps at the same cost per step, so a "
        "strategy that only saves steps must save more of them than the rate does.",
        "",
    ]
    for level in levels:
        fastest = level.fastest
        heading = f"{level.name[0].upper()}{level.name[1:]}: {level_text(level.level)}"
        out += [f"**{heading}; x tuned: `{fastest.label}`**", ""]
        out += decomposition_table(combined, settings.strategies, fastest.label, level.level, "x tuned")
        out.append("")
    return out


def _mean_text(ratio: stats.Interval | None, bound: str = "") -> str:
    if ratio is None or math.isnan(ratio.mean):
        return "n/a"
    return {"lower": "> ", "upper": "< "}.get(bound, "") + f"{ratio.mean:.2f}"


def _reach_mean(reach: StrategyReach) -> str:
    return _mean_text(reach.ratio, reach.ratio_bound)


def decomposition_console(records: list[dict], strategies: list[str], baseline: str, target: float | None) -> list[str]:
    """The console's decomposition: a header, then one line per strategy but the baseline, each level's geometric
    means `per-step cost x steps = completions` (x baseline, paired by seed)."""
    levels = reach_levels(records, baseline, target)
    if not levels or all(s == baseline for s in strategies):
        return []
    names = "; ".join(f"{CSV_LEVELS[name]}: {name} ({level_text(level)})" for name, level in levels)
    lines = [
        f"completions per step x optimizer steps = completions to reach each level ({names}), x baseline paired "
        "by seed, geometric means (> or <: a bound):"
    ]
    for strategy in strategies:
        if strategy == baseline:
            continue
        parts = []
        for name, level in levels:
            found = decompose(records, strategy, baseline, level)
            if found is None:
                break
            factors = [_mean_text(found.step_cost), _reach_mean(found.steps), _reach_mean(found.completions)]
            parts.append(f"{CSV_LEVELS[name]}: {factors[0]} x {factors[1]} = {factors[2]}")
        if parts:
            lines.append(f"  {strategy:<16} " + "; ".join(parts))
    return lines


def decomposition_column_names(target: float | None) -> list[str]:
    """The columns `decomposition_columns` adds to results.csv, in order, beside `reach.reach_column_names`'."""
    keys = ["baseline_final"] + (["target"] if target is not None else [])
    suffixes = ("step_cost_x_baseline", "steps_x_baseline", "completions_x_baseline")
    return [f"reach_{key}_{suffix}" for key in keys for suffix in suffixes]


def decomposition_columns(records: list[dict], baseline: str, target: float | None) -> dict[str, dict]:
    """results.csv's decomposition cells, run name -> column -> value: per level (`reach.CSV_LEVELS`) this run's
    ``reach_<level>_step_cost_x_baseline`` (completions per step up to the level over the baseline run's of the same
    seed), ``reach_<level>_steps_x_baseline`` and ``reach_<level>_completions_x_baseline`` (their product), the
    `SeedFactors` of `decompose`; a censored run enters at what it spent (``reach_<level>_censored`` of this run and
    of the baseline's says which side, so which figure is a bound). Empty where the seed has no baseline run or a
    figure has no value (a run that had the level from its start took no step to it)."""
    cells: dict[str, dict] = {r["name"]: {} for r in records}
    for name, level in reach_levels(records, baseline, target):
        key = f"reach_{CSV_LEVELS[name]}"
        found = {s: decompose(records, s, baseline, level) for s in dict.fromkeys(r["strategy"] for r in records)}
        for record in records:
            decomposition = found[record["strategy"]]
            factors = decomposition.per_seed.get(record["seed"]) if decomposition is not None else None
            if factors is None:
                continue
            values = {"step_cost": factors.step_cost, "steps": factors.steps, "completions": factors.completions}
            cells[record["name"]].update(
                {f"{key}_{part}_x_baseline": None if math.isnan(v) else v for part, v in values.items()}
            )
    return cells
