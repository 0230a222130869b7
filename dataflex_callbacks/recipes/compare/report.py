"""Write a comparison's `results.csv`, `report.md` and figures from the per-run result records.

The report leads with each run's headline (`held_out`: held-out sampled pass@1 on the testbed's headline levels,
or on every held-out prompt of the user's data), with greedy accuracy and every domain beside it.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..held_out import SAMPLED
from . import health, stats
from .decomposition import decomposition_section, tuned_decomposition_section
from .figures import (
    ACCURACY_FIGURES,
    FIGURES_FOLDER,
    PROPORTIONS_FIGURE,
    SEED_CURVES_UP_TO,
    X_LABELS,
    domains_of,
    write_figures,
)
from .method import FUNCTION_METHOD_NOTES, METHOD_NOTES, method_text
from .noise import NOISE_BANDS, difference_noise, evaluation_noise_warning, within_noise
from .reach import (
    headline_description,
    headline_section,
    logged_headline,
    reach_levels,
    reach_table,
    runs_by_seed,
)
from .results_csv import RESULTS_FILE, write_results_csv
from .strategy_recipes import recipe_text
from .tuning import tuning_column_names, tuning_columns, tuning_section
from .verdict import RESOLUTION_TARGET, resolution, verdict_lines

REPORT_FILE = "report.md"
# --------------------------------------------------------------------------- statistics


def headline_after(record: dict) -> float:
    """A run's headline after training."""
    return float(record["headline"]["after"])


def after_training(field: str, domain: str):
    """`record -> its figure after training`: ``accuracy`` (greedy) or ``sampled_pass_at_1`` of `domain`."""
    if field == "accuracy":
        return lambda record: float(record["after"].get(domain, math.nan))
    return lambda record: float(((record.get(SAMPLED) or {}).get("after") or {}).get(domain, math.nan))


def paired_difference(records: list[dict], strategy: str, baseline: str, value=headline_after) -> dict:
    """Per-seed `value` (a record's figure after training; default its headline) of `strategy` minus `baseline`
    (seeds both have): the differences, their paired standard error and 95% interval, the p-value, whether it is
    significant (`stats.significant`)."""
    ours, theirs = runs_by_seed(records, strategy), runs_by_seed(records, baseline)
    seeds = sorted(set(ours) & set(theirs))
    differences = [value(ours[s]) - value(theirs[s]) for s in seeds]
    interval = stats.paired_bootstrap_interval(differences).clipped(-1.0, 1.0)  # differences of accuracies
    p_value = stats.sign_flip_pvalue(differences)
    return {
        "seeds": seeds,
        "differences": differences,
        "standard_error": stats.paired_standard_error(differences),
        "interval": interval,
        "p_value": p_value,
        "significant": stats.significant(interval, p_value),
    }


def paired_differences(settings, records: list[dict]) -> dict[str, dict]:
    """Each strategy but the baseline -> its `paired_difference` of the headline to the baseline."""
    return {s: paired_difference(records, s, settings.baseline) for s in settings.strategies if s != settings.baseline}


def significance_text(paired: dict) -> str:
    """`**significant**`, or `not significant`, saying so when the interval alone excludes 0 (too few seeds)."""
    if paired["significant"]:
        return "**significant**"
    if paired["interval"].excludes_zero:
        return f"not significant (the interval excludes 0, but p >= {stats.ALPHA:g})"
    return "not significant"


def signal_means(runs: list[dict]) -> tuple[float, float]:
    """``(generated completions per trained signal group, completions in zero-signal groups)`` of a strategy's runs:
    all their completions over all their trained signal groups, and the mean over seeds; NaN when a run lacks them."""
    if any(r.get("signal_groups") is None or r.get("zero_signal_completions") is None for r in runs):
        return math.nan, math.nan
    groups = sum(r["signal_groups"] for r in runs)
    per_group = sum(r["completions"] for r in runs) / groups if groups else math.nan
    return per_group, float(np.mean([r["zero_signal_completions"] for r in runs]))


def _fmt(value, digits: int = 3, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _fmt_interval(interval: stats.Interval, signed: bool = False) -> str:
    if interval.n < 2:
        return f"{_fmt(interval.mean, signed=signed)} (interval n/a: needs >= 2 seeds)"
    return (
        f"{_fmt(interval.mean, signed=signed)} [{_fmt(interval.low, signed=signed)}, "
        f"{_fmt(interval.high, signed=signed)}]"
    )


# --------------------------------------------------------------------------- report.md


def budget_lines(settings, records: list[dict]) -> list[str]:
    """How each strategy's runs met the budget: the completions beyond a completions budget (a run stops
    within one generation round of it), and intermediate evaluations that fell together."""
    lines = []
    if settings.budget.unit == "completions":
        rounds = sorted({r["round_completions"] for r in records if r.get("round_completions")})
        round_text = f"one generation round is {', '.join(str(n) for n in rounds)} completions" if rounds else ""
        lines.append(
            f"- overshoot beyond the budget of {settings.budget.amount} completions (a run stops at the "
            f"first step, dynamic-sampling round or allocation screening round that reaches it; {round_text}):"
        )
        for strategy in settings.strategies:
            values = [r.get("overshoot") for r in records if r["strategy"] == strategy]
            if not values:
                continue
            shown = "n/a" if any(v is None for v in values) else f"mean {np.mean(values):.0f}, max {max(values)}"
            lines.append(f"  - `{strategy}`: {shown}")
    planned = len(settings.eval_plan().thresholds())
    short = [
        r["name"] for r in records if r.get("eval_points") and r["eval_points"].get("evaluated", planned) < planned
    ]
    if planned:
        unit = "completions" if settings.budget.unit == "completions" else "steps"
        marks = ", ".join(str(m) for m in settings.eval_plan().thresholds())
        lines.append(
            f"- intermediate evaluations: {planned} per run, after the first step at or past {marks} {unit}"
            + (
                f"; fewer in {', '.join(short)} (a step generated more than the spacing, so one evaluation "
                "served several thresholds)"
                if short
                else ""
            )
        )
    return lines


def _reward_line(base) -> str:
    if base.reward is None:
        return f"- reward: the built-in verifier (`--verifier {base.verifier}`)"
    from ..options import reward_name

    weights = "" if base.reward_weights is None else f" with weights {', '.join(f'{w:g}' for w in base.reward_weights)}"
    return (
        f"- reward: {', '.join(f'`{reward_name(r)}`' for r in base.reward)}{weights}; a held-out completion (greedy "
        f"or sampled) is correct when `{reward_name(base.reward[0])}` gives it at least {base.reward_threshold:g}"
    )


def comparison_warnings(settings, records: list[dict]) -> tuple[str | None, list[str]]:
    """`(all_equal, others)`: the all-equal-accuracies warning (which voids the paired tests and the verdict), and
    the other health warnings (`health`): a headline fallen back to greedy accuracy, a reward that scored nothing,
    truncated completions, a held-out set too small for the differences measured; and each headline difference
    within twice its evaluation noise (`noise`)."""
    all_equal = health.equal_accuracy_warning(records)
    budget = health.budget_use_warning(records)
    greedy = health.greedy_headline_warning(records)
    unscored = health.unscored_reward_warning(records, settings)
    if all_equal:
        return all_equal, [w for w in [budget, greedy, unscored, health.truncation_warning(records, settings)] if w]
    differences = {s: paired["interval"].mean for s, paired in paired_differences(settings, records).items()}
    others = [
        budget,
        greedy,
        unscored,
        health.truncation_warning(records, settings),
        health.held_out_size_warning(records, settings, differences),
        evaluation_noise_warning(records, settings.baseline, differences),
    ]
    return None, [w for w in others if w]


def held_out_sizes(records: list[dict]) -> str:
    """The held-out rows the runs scored, read from their results:
    `8 prompts (a: 3, b: 5)`, per seed when they differ."""

    def sizes(record) -> str:
        rows = record.get("held_out_rows") or {}
        per_domain = ", ".join(f"{d}: {n}" for d, n in sorted((rows.get("per_domain") or {}).items()))
        total = rows.get("total")
        if total is None:
            return "size not recorded"
        return f"{total} prompts" + (f" ({per_domain})" if per_domain else "")

    by_seed = {}
    for record in records:
        by_seed.setdefault(sizes(record), set()).add(record["seed"])
    if len(by_seed) == 1:
        return next(iter(by_seed))
    return "; ".join(f"seed {', '.join(str(s) for s in sorted(seeds))}: {text}" for text, seeds in by_seed.items())


def _settings_lines(settings, outcome) -> list[str]:
    if settings.train is not None:
        from .training_run import report_lines

        return report_lines(settings, outcome)
    base = settings.base
    built_in_model = f"the {base.suite} suite's built-in model"
    total_run_seconds = sum(r["wall_seconds"] for r in outcome.records)
    lines = [
        f"- command: `{settings.command}`" if settings.command else None,
        f"- model: {base.model or built_in_model}; data: {base.dataset or f'the built-in {base.suite} suite'}",
        f"- budget per run: `{settings.budget}` ({settings.completions_per_step} completions per step: "
        f"{base.prompts_per_step} prompts x {base.num_generations} generations, "
        f"{base.max_completion_length} tokens max)",
        *(
            f"- `{label}` trains at its own recipe: {recipe_text(recipe)} (`--strategy-recipe`); paired with "
            f"`{settings.baseline}` at the shared one by seed"
            for label, recipe in (getattr(settings, "strategy_recipes", None) or {}).items()
        ),
        f"- seeds: {', '.join(str(s) for s in sorted({r['seed'] for r in outcome.records}))} (same initial weights, "
        "data and reward noise for every strategy of a seed); baseline: `" + settings.baseline + "`",
        f"- held-out set: {held_out_sizes(outcome.records)}"
        + ("" if base.eval_dataset is None else f" from {base.eval_dataset}")
        + "; accuracies are fractions (0-1)",
        f"- headline: {headline_description(outcome.records)}, the figure RL moves first (it sharpens the "
        "distribution before the greedy answer flips); greedy accuracy and every domain are reported beside it",
        _reward_line(base),
        f"- learning rate: {base.learning_rate:g} (AdamW, constant; `--learning-rate`)",
        None
        if settings.cost_model is None
        else f"- cost model: {settings.cost_model} (`--cost-model`; linear in tokens, no fixed cost per step)",
        f"- wall time: {outcome.wall_seconds:.0f} s for this invocation with {settings.jobs} job(s) "
        f"({len(outcome.computed)} runs computed, {len(outcome.reused)} reused from a previous invocation); "
        f"{total_run_seconds:.0f} s summed over runs",
        *budget_lines(settings, outcome.records),
    ]
    return [line for line in lines if line]


def _table(header: list[str]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]


def _sampled(records: list[dict]) -> bool:
    """Whether the runs measured sampled pass@1 (not with ``--eval-samples 0``)."""
    return all(r.get(SAMPLED) for r in records)


def signal_table(records: list[dict], strategies: list[str]) -> list[str]:
    """Markdown lines near the report's top: per strategy, the completions it generated per trained signal group and
    those in zero-signal groups (`signal_means`), how much generation bought learning signal."""
    out = [
        "**Generation per learning signal** (seeds pooled; a signal group's rewards are not all equal, so it trains; "
        "lower is less generation per group that trained):",
        "",
        *_table(["strategy", "completions per trained signal group", "completions in zero-signal groups (mean/run)"]),
    ]
    for strategy in strategies:
        runs = list(runs_by_seed(records, strategy).values())
        if not runs:
            continue
        per_signal_group, zero_signal = signal_means(runs)
        if math.isnan(zero_signal):  # results written before the signal counts were
            per_group = "n/a (not recorded)"
        elif math.isnan(per_signal_group):
            per_group = "no signal group trained"
        else:
            per_group = _fmt(per_signal_group, 2)
        out.append(f"| `{strategy}` | {per_group} | {_fmt(zero_signal, 0)} |")
    return out + [""]


def _per_domain_text(records: list[dict]) -> str:
    """What the accuracy table's domain cells are: sampled pass@1 / greedy accuracy, greedy accuracy alone, or the
    accuracy a training function logged."""
    if logged_headline(records):
        return (
            "Per domain: the accuracy your training function logged (run.log); dataflex ran no evaluation of its own, "
            "so there is no greedy accuracy or sampled pass@1."
        )
    if _sampled(records):
        return "Per domain: sampled pass@1 / greedy accuracy."
    return "Per domain: greedy accuracy (no sampled pass@1: `--eval-samples 0`)."


def _accuracy_section(records: list[dict], strategies: list[str]) -> list[str]:
    """ "Held-out accuracy after training": per strategy the headline and its change, greedy accuracy overall, each
    domain (sampled pass@1 / greedy; as logged for a training function), and the compute each run spent."""
    domains, sampled, logged = domains_of(records), _sampled(records), logged_headline(records)
    out = [
        "## Held-out accuracy after training",
        "",
        "Mean over seeds with the Student-t 95% interval `[low, high]`; `change` is after minus before. "
        + _per_domain_text(records),
        "",
    ]
    out += _table(
        [
            "strategy",
            "seeds",
            "headline",
            "change",
            *([] if logged else ["greedy overall"]),  # a training function's overall is the headline itself
            *domains,
            "completions",
            "completion tokens",
            "kept fraction",
            "wall s/run",
            "completions per trained signal group",
            "completions in zero-signal groups",
        ]
    )
    for strategy in strategies:
        runs = list(runs_by_seed(records, strategy).values())
        if not runs:
            continue
        headline = stats.accuracy_interval([r["headline"]["after"] for r in runs])
        change = stats.mean_interval([r["headline"]["after"] - r["headline"]["before"] for r in runs])
        cells = [f"`{strategy}`", str(len(runs)), _fmt_interval(headline)]
        cells += [_fmt_interval(change.clipped(-1.0, 1.0), signed=True)]
        if not logged:
            cells += [_fmt(float(np.mean([r["after"]["overall"] for r in runs])))]
        for domain in domains:
            greedy = _fmt(float(np.mean([after_training("accuracy", domain)(r) for r in runs])))
            cells.append(
                f"{_fmt(float(np.mean([after_training(SAMPLED, domain)(r) for r in runs])))} / {greedy}"
                if sampled
                else greedy
            )
        cells += [
            f"{np.mean([r['completions'] for r in runs]):.0f}",
            f"{np.mean([r['completion_tokens'] for r in runs]):.0f}",
            _fmt(float(np.mean([r["kept_frac"] for r in runs])), 2),
            f"{np.mean([r['wall_seconds'] for r in runs]):.0f}",
        ]
        per_signal_group, zero_signal = signal_means(runs)
        cells += [_fmt(per_signal_group, 2), _fmt(zero_signal, 0)]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _paired_section(settings, records: list[dict], degenerate: bool) -> list[str]:
    """ "Paired difference to the baseline": the headline's per seed, with its paired SE (the resolution), interval,
    p-value and significance; then per domain, sampled pass@1 and greedy accuracy."""
    others = [s for s in settings.strategies if s != settings.baseline]
    if not others:
        return []
    n_seeds = len(settings.seeds)
    out = [
        f"## Paired difference to the baseline `{settings.baseline}`",
        "",
        "The headline after training, strategy minus baseline, paired by seed. `paired SE` is the standard error "
        "of the mean paired difference over seeds (paired bootstrap): the comparison's resolution. `resolves` is "
        "t(n-1) x SE, the half-width of the 95% interval: a smaller difference is not resolved (more seeds shrink "
        "it as 1/sqrt(seeds); more held-out prompts shrink the evaluation noise within it). "
        f"**significant** means the 95% paired interval excludes 0 and the sign-flip p-value is below "
        f"{stats.ALPHA:g}. `evaluation noise` is {NOISE_BANDS:g} x the binomial standard error of the mean "
        "difference from the held-out evaluation alone (`noise`: prompts x samples per prompt of each run); a "
        "difference within it is marked `(within noise)`. "
        f"With {n_seeds} seeds the smallest possible sign-flip p-value is "
        f"{_fmt(stats.min_attainable_pvalue(n_seeds))}"
        + (" (6 seeds or more can be significant)." if stats.min_attainable_pvalue(n_seeds) >= stats.ALPHA else "."),
        "",
    ]
    out += _table(
        ["strategy", "difference per seed", "mean [95% paired interval]", "paired SE", "resolves"]
        + ["evaluation noise", "sign-flip p", "significance"]
    )
    resolved = {}
    for strategy in others:
        paired = paired_difference(records, strategy, settings.baseline)
        per_seed = ", ".join(
            f"{s}: {_fmt(d, signed=True)}" for s, d in zip(paired["seeds"], paired["differences"], strict=True)
        )
        significance, p_value = significance_text(paired), _fmt(paired["p_value"])
        smallest = resolution(paired)
        resolved[strategy] = smallest
        if len(paired["seeds"]) < 2:  # one pair: no interval, and a sign-flip test of one value says nothing
            significance = p_value = "n/a (needs >= 2 seeds)"
        if degenerate:
            significance = p_value = "n/a (all accuracies equal: see the warning above)"
        standard_error = _fmt(paired["standard_error"], 4)
        shown = "n/a" if not math.isfinite(smallest) else f"±{smallest:.3f}"
        noise = difference_noise(records, strategy, settings.baseline)
        noisy = " (within noise)" if within_noise(paired["interval"].mean, noise) else ""
        noise_cell = "n/a" if not math.isfinite(noise) else f"±{NOISE_BANDS * noise:.3f}{noisy}"
        out.append(
            f"| `{strategy}` | {per_seed} | {_fmt_interval(paired['interval'], signed=True)} | {standard_error} | "
            f"{shown} | {noise_cell} | {p_value} | {significance} |"
        )
    fine = [f"`{s}`" for s, value in resolved.items() if math.isfinite(value) and value < RESOLUTION_TARGET]
    coarse = [f"`{s}`" for s in resolved if f"`{s}`" not in fine]
    out += [
        "",
        f"A difference of {RESOLUTION_TARGET:g} in the headline is resolved (t(n-1) x SE < {RESOLUTION_TARGET:g}) "
        f"for: {', '.join(fine) or 'none'}; not for: {', '.join(coarse) or 'none'}.",
        "",
    ]
    domains = domains_of(records)
    metrics = [(SAMPLED, "sampled pass@1")] if _sampled(records) else []
    accuracy = "logged accuracy" if logged_headline(records) else "greedy accuracy"
    for field, name in [*metrics, ("accuracy", accuracy)]:
        out += [
            f"Per domain, {name} (mean paired difference [95% interval]; `*` marks a significant difference, "
            "as above):",
            "",
        ]
        out += _table(["strategy", *domains])
        for strategy in others:
            cells = []
            for domain in domains:
                paired = paired_difference(records, strategy, settings.baseline, after_training(field, domain))
                cells.append(_fmt_interval(paired["interval"], signed=True) + (" *" if paired["significant"] else ""))
            out.append(f"| `{strategy}` | " + " | ".join(cells) + " |")
        out.append("")
    return out


def render_report(settings, outcome) -> str:
    """The markdown report: compute to reach the target headline first, then per-strategy intervals, paired
    differences to the baseline with their resolution, figures, method."""
    records = outcome.records
    strategies = settings.strategies
    out = ["# Strategy comparison", "", *_settings_lines(settings, outcome), ""]
    degenerate, cautions = comparison_warnings(settings, records)
    for text in [degenerate, *cautions]:
        out += [f"> **Warning:** {text}.", ""] if text else []
    out += signal_table(records, strategies)

    unavailable = "all held-out accuracies are equal (see the warning above)" if degenerate else None
    out += headline_section(records, strategies, settings.baseline, settings.target, unavailable, settings.cost_model)
    out += decomposition_section(records, strategies, settings.baseline, settings.target, unavailable)
    out += tuning_section(settings, records, outcome.tuned, unavailable)
    out += tuned_decomposition_section(settings, records, outcome.tuned, unavailable)
    out += _accuracy_section(records, strategies)
    out += _paired_section(settings, records, bool(degenerate))

    base_level, reach = reach_table(records, strategies, settings.baseline)
    if reach and not degenerate:  # reaching a level every run holds from the start says nothing
        out += [
            "## Secondary view (not the headline): completions for the seed-mean curve to reach the baseline's "
            f"final mean headline ({_fmt(base_level)})",
            "",
            "The first section is the answer; this table asks it of the headline curves averaged over seeds "
            "(evaluation points, linear in between) instead of each seed's own curve, so its numbers can differ "
            "from the first section's. The completions from which a seed-mean curve stays at or above the "
            "baseline's final mean; the baseline's own row is the reference. No interval: one curve per strategy.",
            "",
            *reach,
            "",
        ]

    notes = sorted({(r["strategy"], note) for r in records for note in r.get("notes", [])})
    if notes:
        out += ["## Warnings from the runs", ""]
        out += [f"- `{strategy}`: {note}" for strategy, note in notes]
        out.append("")

    out += ["## Figures", ""]
    for axis, name in ACCURACY_FIGURES.items():
        out += [f"![held-out accuracy against {X_LABELS[axis]}]({FIGURES_FOLDER}/{name})", ""]
    logged = logged_headline(records)
    out += [
        (
            "Panels: the logged accuracy (dashed: the levels of the first section), then each domain as logged"
            if logged
            else "Panels: the headline (dashed: the levels of the first section), greedy accuracy overall, then each "
            "domain in the headline's metric"
        )
        + f"; mean over seeds (thick), with each seed's own curve (thin) up to {SEED_CURVES_UP_TO} seeds and the 95% "
        f"band from {SEED_CURVES_UP_TO + 1} seeds on (the band of 2-3 seeds spans most of the axis and hides the "
        "curves). "
        + (
            "Each curve has the points your training function logged (run.log), before and after training among them."
            if logged
            else "Each curve has the evaluation points of `--eval-points`, before and after training."
        ),
        "",
        f"![domain proportions over steps]({FIGURES_FOLDER}/{PROPORTIONS_FIGURE})",
        "",
        "## Method",
        "",
        method_text(),
        "",
        *(FUNCTION_METHOD_NOTES if logged else METHOD_NOTES),
        "",
        "## Verdict",
        "",
        *verdict_lines(settings, records, paired_differences(settings, records), unavailable, outcome.tuned),
        "",
    ]
    return "\n".join(out)


def write_report(settings, outcome) -> dict[str, str]:
    """Write results.csv, report.md and the figures into the comparison folder; returns their paths: ``results``,
    ``report`` and each figure by its file name (`figures.write_figures`)."""
    folder = settings.output_dir
    paths = {"results": os.path.join(folder, RESULTS_FILE), "report": os.path.join(folder, REPORT_FILE)}
    os.makedirs(folder, exist_ok=True)
    rows, tuned_cells = tuning_columns(settings, outcome.records, outcome.tuned)
    write_results_csv(
        paths["results"], rows, settings.baseline, settings.target, tuned_cells, tuning_column_names(settings)
    )
    levels = reach_levels(outcome.records, settings.baseline, settings.target)
    paths.update(
        write_figures(
            os.path.join(folder, FIGURES_FOLDER), outcome.records, settings.strategies, settings.baseline, levels
        )
    )
    with open(paths["report"], "w") as handle:
        handle.write(render_report(settings, outcome))
    return paths
