"""Better than tuning? Every strategy against plain GRPO at the fastest of several learning rates.

A strategy that saves compute against plain GRPO at one learning rate may only make up for a rate that was off.
With ``--tune-learning-rates`` the baseline strategy also trains at each listed rate with every seed
(`CompareSettings.tuning_runs`; the shared rate is the grid's own baseline runs). For each level of the headline
(`reach.reach_levels`: the baseline's final headline on each seed, and ``--target``) the fastest rate is the one
whose runs reach it in the fewest completions: the geometric mean over seeds of each seed's completions to reach it
(`reach.seed_cost_to_reach`). A rate whose run ends below the level on some seed is censored there, and ranks after
every rate that reached it on all seeds (censored rates rank by how many seeds are censored, then by the geometric
mean with a censored seed counted at what it spent). Every strategy's completions to reach the level are then paired
by seed with the fastest rate's runs and with the baseline at the shared rate (`reach.strategy_reach`: the
geometric-mean ratio with its paired 95% interval, a bound where one run of a pair is censored).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .reach import (
    CSV_LEVELS,
    StrategyReach,
    level_text,
    ratio_cell,
    reach_cell,
    reach_levels,
    strategy_reach,
)
from .settings import rate_text

AXIS = "completions"
"""The unit the sweep ranks rates in and pairs strategies with: the budget's."""
SECTION = "Against the tuned baseline"


def swept(settings) -> bool:
    """Whether the comparison has a learning-rate sweep (a settings stand-in without the field has none)."""
    return bool(getattr(settings, "tune_learning_rates", None))


def rate_label(baseline: str, rate: float) -> str:
    """How the report names plain GRPO at a rate of the sweep: `baseline@lr3e-05`."""
    return f"{baseline}@lr{rate_text(rate)}"


def geometric_mean(values) -> float:
    """The geometric mean of costs (0 when one is 0: that run had the level from the start; inf for none)."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0:
        return math.inf
    if (x <= 0).any():
        return 0.0
    return float(np.exp(np.log(x).mean()))


@dataclass
class RateReach:
    """Plain GRPO at one learning rate: its completions to reach a level, per seed (`reach.StrategyReach`)."""

    rate: float
    label: str
    reach: StrategyReach

    @property
    def rank(self) -> tuple[int, float]:
        """Smaller is faster: censored seeds first (a censored rate is never the fastest unless all are), then the
        geometric mean over seeds (a censored seed at what it spent)."""
        return len(self.reach.censored), geometric_mean(self.reach.bounded().values())


@dataclass
class TunedLevel:
    """One level of the headline against the sweep: every rate, the fastest, and each strategy and rate paired with
    the fastest (`against_fastest`, by name or rate label) and with the baseline at the shared rate (`against_own`)."""

    name: str
    level: object
    shared: RateReach
    rates: list[RateReach]
    fastest: RateReach
    against_fastest: dict[str, StrategyReach]
    against_own: dict[str, StrategyReach]


def sweep_records(settings, records: list[dict], tuned: list[dict]) -> tuple[list[dict], dict[float, str]]:
    """The grid's records and the sweep's, each sweep run renamed after its rate (`rate_label`) so it is paired
    apart from the baseline at the shared rate; and rate -> name, the shared rate named by the baseline itself."""
    labels = {settings.base.learning_rate: settings.baseline}
    for rate in settings.tune_learning_rates or []:
        labels.setdefault(rate, rate_label(settings.baseline, rate))
    renamed = [
        {**r, "strategy": labels.get(r["learning_rate"]) or rate_label(settings.baseline, r["learning_rate"])}
        for r in tuned
    ]
    return records + renamed, dict(sorted(labels.items()))


def tuned_levels(settings, records: list[dict], tuned: list[dict]) -> list[TunedLevel]:
    """Each level of the headline against the sweep (`TunedLevel`); [] without ``--tune-learning-rates``."""
    if not swept(settings):
        return []
    combined, labels = sweep_records(settings, records, tuned)
    found = []
    for name, level in reach_levels(records, settings.baseline, settings.target):
        rates = []
        for rate, label in labels.items():
            reach = strategy_reach(combined, label, label, level, AXIS)
            if reach is not None and reach.per_seed:
                rates.append(RateReach(rate, label, reach))
        shared = next((r for r in rates if r.label == settings.baseline), None)
        if shared is None:
            continue
        fastest = min(rates, key=lambda r: r.rank)
        names = list(dict.fromkeys([*settings.strategies, *labels.values()]))
        found.append(
            TunedLevel(
                name,
                level,
                shared,
                rates,
                fastest,
                {s: strategy_reach(combined, s, fastest.label, level, AXIS) for s in names},
                {s: strategy_reach(records, s, settings.baseline, level, AXIS) for s in settings.strategies},
            )
        )
    return found


def _rate_note(settings, rate: RateReach, tuned: TunedLevel) -> str:
    notes = ["shared" if rate.label == settings.baseline else "", "fastest" if rate is tuned.fastest else ""]
    shown = ", ".join(n for n in notes if n)
    return f"{rate_text(rate.rate)}" + (f" ({shown})" if shown else "")


def tuning_section(settings, records: list[dict], tuned: list[dict], unavailable: str | None = None) -> list[str]:
    """report.md's "Against the tuned baseline" (markdown lines); [] without ``--tune-learning-rates``."""
    if not swept(settings):
        return []
    base = settings.baseline
    out = [f"## {SECTION}", ""]
    levels = tuned_levels(settings, records, tuned)
    if unavailable or not levels:
        return out + [f"n/a: {unavailable or 'no baseline runs'}.", ""]
    out += [
        f"Better than tuning? Plain GRPO (`{base}`) also trained at each learning rate of `--tune-learning-rates`, "
        "with the same seeds. Per level, the fastest rate is the one whose runs reach it in the fewest completions "
        "(geometric mean over seeds; a rate that ends below the level on a seed is censored there and is never the "
        "fastest unless every rate is). `x tuned`: per seed the completions a strategy needs / those of the fastest "
        f"rate's run, geometric mean [paired 95% interval]; `x {base}`: the same against `{base}` at the shared rate "
        f"({rate_text(settings.base.learning_rate)}), as in the first section. Below 1: the strategy needs fewer "
        "completions. Cells as in the first section (`> spent` where a run did not reach the level; a ratio with "
        "such a run is a bound).",
        "",
    ]
    for tuned_level in levels:
        fastest = tuned_level.fastest
        out += [
            f"### {tuned_level.name[0].upper()}{tuned_level.name[1:]}: {level_text(tuned_level.level)}",
            "",
            f"Fastest plain-GRPO learning rate: {rate_text(fastest.rate)} (`{fastest.label}`).",
            "",
            "| plain GRPO at learning rate | completions to reach | x tuned |",
            "|---|---|---|",
        ]
        for rate in tuned_level.rates:
            paired = tuned_level.against_fastest[rate.label]
            out.append(
                f"| {_rate_note(settings, rate, tuned_level)} | {reach_cell(rate.reach)} | "
                f"{ratio_cell(paired, fastest.label)} |"
            )
        out += ["", f"| strategy | completions to reach | x tuned (lr {rate_text(fastest.rate)}) | x {base} |"]
        out.append("|---|---|---|---|")
        for strategy in settings.strategies:
            own, paired = tuned_level.against_own.get(strategy), tuned_level.against_fastest.get(strategy)
            if strategy == base or own is None or paired is None:
                continue
            cells = [reach_cell(own), ratio_cell(paired, fastest.label), ratio_cell(own, base)]
            out.append(f"| `{strategy}` | " + " | ".join(cells) + " |")
        out.append("")
    return out


def tuning_console(settings, records: list[dict], tuned: list[dict]) -> list[str]:
    """The console summary's lines of the sweep: per level, each rate and each strategy, x the fastest rate (and
    each strategy x the baseline at the shared rate); [] without ``--tune-learning-rates``."""
    lines = []
    base = settings.baseline
    for tuned_level in tuned_levels(settings, records, tuned):
        fastest = tuned_level.fastest
        lines.append(
            f"against the tuned baseline: completions to reach {tuned_level.name} ({level_text(tuned_level.level)}); "
            f"fastest plain-GRPO learning rate {rate_text(fastest.rate)} of "
            f"{', '.join(rate_text(r.rate) for r in tuned_level.rates)}, x tuned paired by seed:"
        )
        for rate in tuned_level.rates:
            ratio = ratio_cell(tuned_level.against_fastest[rate.label], fastest.label)
            lines.append(
                f"  lr {_rate_note(settings, rate, tuned_level):<12} {reach_cell(rate.reach)}; x tuned: {ratio}"
            )
        for strategy in settings.strategies:
            own, paired = tuned_level.against_own.get(strategy), tuned_level.against_fastest.get(strategy)
            if strategy == base or own is None or paired is None:
                continue
            lines.append(
                f"  {strategy:<15} {reach_cell(own)}; x tuned: {ratio_cell(paired, fastest.label)}; "
                f"x {base}: {ratio_cell(own, base)}"
            )
    return lines


def tuning_column_names(settings) -> list[str]:
    """The columns `tuning_columns` adds to results.csv, in order; [] without ``--tune-learning-rates``."""
    if not swept(settings):
        return []
    keys = ["baseline_final"] + (["target"] if settings.target is not None else [])
    suffixes = ("fastest_lr", "x_fastest", "x_baseline")
    return ["learning_rate"] + [f"tuned_{key}_{suffix}" for key in keys for suffix in suffixes]


def _seed_ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None:
        return None
    if bottom == 0:
        return 1.0 if top == 0 else None
    return top / bottom


def tuning_columns(settings, records: list[dict], tuned: list[dict]) -> tuple[list[dict], dict[str, dict]]:
    """results.csv's records and cells with the sweep: the grid's records and the sweep's (named `rate_label`), and
    run name -> column -> value: ``learning_rate``, and per level (`reach.CSV_LEVELS`) ``tuned_<level>_fastest_lr``,
    ``tuned_<level>_x_fastest`` and ``tuned_<level>_x_baseline``: this run's completions to reach the level over the
    fastest rate's run and the shared-rate baseline's run of the same seed (a censored run counted at what it spent,
    as its ``reach_<level>_censored`` says). Without ``--tune-learning-rates`` the grid's records and no cells."""
    if not swept(settings):
        return records, {}
    combined, _ = sweep_records(settings, records, tuned)
    cells = {r["name"]: {"learning_rate": r.get("learning_rate", settings.base.learning_rate)} for r in combined}
    for tuned_level in tuned_levels(settings, records, tuned):
        key = f"tuned_{CSV_LEVELS[tuned_level.name]}"
        costs: dict[str, dict[int, float]] = {}
        for record in combined:
            label = record["strategy"]
            if label not in costs:
                reach = strategy_reach(combined, label, label, tuned_level.level, AXIS)
                costs[label] = reach.bounded() if reach is not None else {}
        fastest, shared = costs[tuned_level.fastest.label], costs[settings.baseline]
        for record in combined:
            seed, own = record["seed"], costs[record["strategy"]].get(record["seed"])
            cells[record["name"]].update(
                {
                    f"{key}_fastest_lr": tuned_level.fastest.rate,
                    f"{key}_x_fastest": _seed_ratio(own, fastest.get(seed)),
                    f"{key}_x_baseline": _seed_ratio(own, shared.get(seed)),
                }
            )
    return combined, cells


def _shown(ratio) -> str:
    return f"{ratio.mean:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]"


def tuning_verdict(settings, records: list[dict], tuned: list[dict]) -> list[str]:
    """The verdict's bullets on the sweep, one per level: which strategies beat the tuned baseline (their paired
    interval against the fastest rate wholly below 1x, no bound), or that none is shown to, and whether tuning the
    learning rate is the better saving; [] without ``--tune-learning-rates``."""
    lines = []
    base = settings.baseline
    for tuned_level in tuned_levels(settings, records, tuned):
        fastest, where = tuned_level.fastest, f"to reach {tuned_level.name}"
        beats = []
        for strategy in settings.strategies:
            paired = tuned_level.against_fastest.get(strategy)
            ratio = None if paired is None or strategy == base else paired.ratio
            if ratio is None or ratio.n < 2 or paired.ratio_bound or not math.isfinite(ratio.high):
                continue
            if ratio.high < 1.0:
                beats.append(f"`{strategy}` {_shown(ratio)}")
        tuned_text = f"plain GRPO at its fastest learning rate ({rate_text(fastest.rate)})"
        if beats:
            lines.append(
                f"- Better than tuning {where}: {'; '.join(beats)} of the completions of {tuned_text} (paired by "
                "seed, [95% interval])."
            )
            continue
        if fastest is tuned_level.shared:
            lines.append(
                f"- No strategy is shown to beat the tuned baseline {where}: the shared learning rate "
                f"({rate_text(fastest.rate)}) is already the fastest of the rates tried, so tuning it saves nothing "
                "here either."
            )
            continue
        saving = tuned_level.against_fastest[base]
        ratio, shared = saving.ratio, rate_text(settings.base.learning_rate)
        shown = ratio is not None and ratio.n >= 2 and not saving.ratio_bound and ratio.low > 1.0
        # Whether tuning is the better saving needs its own interval: `base` at the shared rate needs more.
        verdict = "; tuning the learning rate is the better saving" if shown else ", nor is tuning the learning rate"
        lines.append(
            f"- No strategy is shown to beat the tuned baseline {where}{verdict}: `{base}` at the shared rate "
            f"({shared}) needs {ratio_cell(saving, fastest.label)} of the completions of {tuned_text}, the fastest "
            "of the rates tried (paired by seed, [95% interval])."
        )
    return lines
