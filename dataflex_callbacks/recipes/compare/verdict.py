"""Say which strategy, if any, a comparison shows to help: the verdict that ends report.md and the console summary.

Rule of evidence: a strategy helps only where a paired 95% interval over seeds says so, in the unit it saves: its
compute to reach a level (`reach.strategy_reach`: the paired ratio to the baseline, interval and all, below 1x; never
a ratio that is only a bound because a run did not reach the level within the budget) or
its headline at the same budget (the paired difference to the baseline, interval and all, above 0). An interval
wholly on the other side says it hurts. Anything else is shown neither way, and the verdict says so rather than
reading a point estimate as an effect; with 1 seed there is no interval, and it says that. Then what to try next:
more seeds while intervals are wide, a learning-rate check when the baseline itself did not learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import stats
from .cost_model import MODELLED_COST, with_modelled_cost
from .reach import AXES, level_text, reach_levels, runs_by_seed, strategy_reach
from .tuning import tuning_verdict

VERDICT_AXES = ("completions", "step", "completion_tokens", "trained_tokens", "wall_seconds")
"""The units a strategy may be shown to save (and the modelled cost with ``--cost-model``); generation and update
seconds are parts of training seconds, so they would only repeat it."""
RESOLUTION_TARGET = 0.02
"""The paired difference in the headline a comparison should resolve; the report says which strategies it does."""
MAX_SEEDS_SUGGESTED = 1000  # `--seeds` accepts at most 1000: beyond it more seeds are not the fix
CONFIRMING_SEEDS = 6  # the fewest seeds whose exact sign-flip test can reach p < 0.05 (2 / 2^6)


@dataclass
class Finding:
    """One effect a paired interval shows: `helps` (True: the strategy saves or ends higher; False: the reverse)."""

    strategy: str
    helps: bool
    text: str


def resolution(paired: dict) -> float:
    """The smallest paired difference a comparison resolves: ``t(n-1) * SE``, the half-width of its 95% interval
    (NaN with fewer than 2 seeds)."""
    return stats.t_critical(len(paired["seeds"]) - 1) * paired["standard_error"]


def seeds_to_resolve(paired: dict, target: float = RESOLUTION_TARGET) -> int | None:
    """The seeds from which the paired difference of `paired` would resolve `target`, if the spread between seeds
    stays as measured (SE shrinks as 1/sqrt(seeds)); None with fewer than 2 seeds or beyond `MAX_SEEDS_SUGGESTED`."""
    n, standard_error = len(paired["seeds"]), paired["standard_error"]
    if n < 2 or not math.isfinite(standard_error):
        return None
    for seeds in range(n, MAX_SEEDS_SUGGESTED + 1):
        if stats.t_critical(seeds - 1) * standard_error * math.sqrt(n / seeds) < target:
            return seeds
    return None


def _ratio_text(interval: stats.Interval) -> str:
    return f"{interval.mean:.2f}x [{interval.low:.2f}, {interval.high:.2f}]"


def reach_findings(records: list[dict], strategy: str, baseline: str, levels, axes) -> list[Finding]:
    """What the paired ratios of `strategy`'s compute to reach each of `levels` show, one finding per level and
    direction: the units (of `axes`) whose whole interval lies below 1x (saves) or above it (costs more)."""
    findings = []
    for name, level in levels:
        saved, spent = [], []
        for axis in axes:
            reach = strategy_reach(records, strategy, baseline, level, axis)
            ratio = None if reach is None else reach.ratio
            if ratio is None or ratio.n < 2 or not (math.isfinite(ratio.low) and math.isfinite(ratio.high)):
                continue  # no interval: nothing is shown either way
            if reach.ratio_bound:
                # A bound is no saving: a censored run's cost was counted at what it spent, so a lower bound above
                # 1x still shows the strategy needs more, and an upper bound (the baseline censored) is not claimed.
                if reach.ratio_bound == "lower" and ratio.low > 1.0:
                    spent.append(
                        f"{AXES[axis][0]}: more than {ratio.mean:.2f}x [{ratio.low:.2f}, inf) (a lower bound: it did "
                        f"not reach the level within the budget in seed {', '.join(map(str, reach.censored_pairs))})"
                    )
                continue
            unit = f"{AXES[axis][0]}: {_ratio_text(ratio)}"
            if ratio.high < 1.0:
                saved.append(unit)
            elif ratio.low > 1.0:
                spent.append(unit)
        # A per-seed level (the baseline's own final headline) is named, not printed: its mean would read as one level.
        value = "" if isinstance(level, dict) else f" {level_text(level)}"
        where = f"of the baseline's, to reach {name}{value} (paired by seed, [95% interval])"
        if saved:
            findings.append(Finding(strategy, True, f"`{strategy}` saves {'; '.join(saved)} {where}"))
        if spent:
            findings.append(Finding(strategy, False, f"`{strategy}` needs more {'; '.join(spent)} {where}"))
    return findings


def headline_finding(strategy: str, paired: dict) -> Finding | None:
    """What the paired difference of the headline at the same budget shows: higher, lower, or nothing (None)."""
    interval = paired["interval"]
    if interval.n < 2 or not interval.excludes_zero:
        return None
    shown = f"{interval.mean:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]"
    direction = "higher" if interval.low > 0 else "lower"
    return Finding(
        strategy,
        interval.low > 0,
        f"`{strategy}` ends {direction} at the same budget: its headline minus the baseline's is {shown} (paired by "
        "seed, [95% interval])",
    )


def _next_steps(differences: dict[str, dict], findings: list[Finding]) -> list[str]:
    """What to try next: more seeds while the headline's differences are not resolved, the seeds the sign-flip test
    needs when an effect is shown with fewer."""
    steps = []
    seeds = max((len(p["seeds"]) for p in differences.values()), default=0)
    shown = {f.strategy for f in findings}
    wide = {s: p for s, p in differences.items() if s not in shown and not resolution(p) < RESOLUTION_TARGET}
    if wide:
        needed = [n for n in (seeds_to_resolve(p) for p in wide.values()) if n is not None]
        best = min(wide, key=lambda s: resolution(wide[s]))
        names = ", ".join(f"`{s}`" for s in wide)
        fewest = min(needed, default=None)
        how = (
            f"about {fewest} seeds (`--num-seeds {fewest}`) would resolve {RESOLUTION_TARGET:g} if the spread between "
            "seeds stays as measured"
            if fewest is not None and fewest > seeds
            else "more held-out prompts (`--n-test`) or samples per prompt (`--eval-samples`) shrink the evaluation "
            "noise in them"
        )
        steps.append(
            f"intervals are wide for {names}: with {seeds} seeds the headline difference resolves "
            f"±{resolution(wide[best]):.3f} at best (`{best}`); {how}. A resumed comparison with more seeds trains "
            "only the new runs."
        )
    if findings and seeds < CONFIRMING_SEEDS:
        steps.append(
            f"with {seeds} seeds the sign-flip test cannot reach p < {stats.ALPHA:g} (its smallest p is "
            f"{stats.min_attainable_pvalue(seeds):.3g}); {CONFIRMING_SEEDS} seeds or more let it confirm what the "
            "intervals show."
        )
    return steps


def baseline_check(settings, records: list[dict]) -> str | None:
    """A learning-rate check to try when the baseline's own headline did not rise (its paired-over-seeds change
    interval, or with 1 seed its change, not above 0); None when it did."""
    base_runs = list(runs_by_seed(records, settings.baseline).values())
    if not base_runs:
        return None
    change = stats.mean_interval([r["headline"]["after"] - r["headline"]["before"] for r in base_runs])
    if change.low > 0 if change.n >= 2 else change.mean > 0:
        return None
    shown = f"{change.mean:+.3f}" + (f" [{change.low:+.3f}, {change.high:+.3f}]" if change.n >= 2 else "")
    if settings.train is not None:  # the learning rate is the training function's own
        return (
            f"`{settings.baseline}` (the baseline) did not clearly learn (headline change {shown} over "
            f"{change.n} seed{'s' if change.n != 1 else ''}): check the learning rate and budget in your training "
            "function before reading differences between strategies."
        )
    return (
        f"`{settings.baseline}` (the baseline) did not clearly learn (headline change {shown} over "
        f"{change.n} seed{'s' if change.n != 1 else ''}): check its learning rate (now "
        f"{settings.base.learning_rate:g}; `--learning-rate`), e.g. with `--tune-learning-rates` at a few rates, "
        "before reading differences between strategies."
    )


def verdict_lines(
    settings, records: list[dict], differences: dict[str, dict], unavailable: str | None, tuned: list[dict] = ()
) -> list[str]:
    """The verdict in plain words, markdown bullets: what each strategy is shown to save (unit, paired interval) or
    cost, or that no strategy is shown to help; whether any beats the tuned baseline (`tuned`: the learning-rate
    sweep's records, `tuning.tuning_verdict`); how certain; what to try next. `differences` maps each strategy
    but the baseline to its paired headline difference (`report.paired_difference`); `unavailable` says why no
    verdict can be given (every accuracy equal)."""
    if unavailable:
        return [
            f"- No verdict: {unavailable}, so no strategy can be shown to help or hurt.",
            "- Next: fix what the warning names, then rerun the comparison.",
        ]
    seeds = max((len(p["seeds"]) for p in differences.values()), default=0)
    check = baseline_check(settings, records)
    against_tuned = tuning_verdict(settings, records, list(tuned))
    if seeds < 2:
        lines = (
            ["- Only the baseline ran: there is no strategy to compare with it."]
            if not differences
            else [
                f"- With {seeds} seed{'s' if seeds != 1 else ''} paired with the baseline no interval can be given, "
                "so no strategy is shown to help or hurt; the tables above are one seed's measurements.",
                "- Next: run 3 seeds or more (`--num-seeds 3`; a resumed comparison trains only the new runs).",
            ]
        )
        return lines + against_tuned + ([f"- Next: {check}"] if check else [])
    axes = VERDICT_AXES + ((MODELLED_COST,) if settings.cost_model is not None else ())
    records = with_modelled_cost(records, settings.cost_model)
    levels = reach_levels(records, settings.baseline, settings.target)
    findings: list[Finding] = []
    for strategy, paired in differences.items():
        findings += reach_findings(records, strategy, settings.baseline, levels, axes)
        found = headline_finding(strategy, paired)
        findings += [found] if found else []
    lines = [f"- {f.text}." for f in findings if f.helps]
    if not lines:
        lines.append("- No strategy is shown to help: no paired interval excludes 1x (compute) or 0 (headline).")
    lines += [f"- {f.text}." for f in findings if not f.helps]
    neither = [f"`{s}`" for s in differences if s not in {f.strategy for f in findings}]
    if neither:
        lines.append(
            f"- Shown neither to help nor to hurt: {', '.join(neither)} (no paired interval of theirs excludes 1x or "
            "0)."
        )
    lines += against_tuned
    seconds = "training seconds are as measured on this machine" + (", shared by the runs" if settings.jobs > 1 else "")
    lines.append(
        f"- Certainty: {seeds} seeds, each paired with the baseline's run of the same seed; a strategy helps only "
        f"where its paired 95% interval excludes 1x or 0 in the unit it saves; {seconds}."
    )
    steps = _next_steps(differences, findings) + ([check] if check else [])
    return lines + [f"- Next: {step}" for step in steps]
