"""Write a comparison's `results.csv`, `report.md` and figures from the per-run result records."""

from __future__ import annotations

import csv
import math
import os

import numpy as np

from ..run_folder import domain_colors
from . import health, stats
from .reach import headline_section, level_text, mean_curve, reach_levels, reach_table, recorded

REPORT_FILE = "report.md"
RESULTS_FILE = "results.csv"
FIGURES_FOLDER = "figures"
ACCURACY_FIGURE = "accuracy_vs_completions.png"
TOKENS_FIGURE = "accuracy_vs_tokens.png"
PROPORTIONS_FIGURE = "domain_proportions.png"
RUN_COLUMNS = (
    "strategy",
    "seed",
    "budget",
    "steps",
    "completions",
    "completion_tokens",
    "wall_seconds",
    "kept_frac",
    "accuracy_before_overall",
    "accuracy_after_overall",
    "accuracy_gain_overall",
    "signal_groups",
    "zero_signal_completions",
    "completions_per_signal_group",
    "overshoot",
    "eval_points",
)
SIGNAL_FIELDS = ("signal_groups", "zero_signal_completions", "completions_per_signal_group", "overshoot")
"""Per-run fields a result written before they existed lacks; the report shows n/a for them."""


def domains_of(records: list[dict]) -> list[str]:
    """Domains evaluated in any run, sorted (without `overall`)."""
    return sorted({d for r in records for d in r["after"] if d != "overall"})


def results_columns(records: list[dict]) -> list[str]:
    per_domain = [f"accuracy_{when}_{d}" for d in domains_of(records) for when in ("before", "after")]
    return [*RUN_COLUMNS, *per_domain, "run_dir"]


def result_row(record: dict) -> dict:
    """One results.csv row: a run's budget use and held-out accuracy before and after."""
    row = {
        key: record[key]
        for key in (
            "strategy",
            "seed",
            "budget",
            "steps",
            "completions",
            "completion_tokens",
            "wall_seconds",
            "kept_frac",
            "run_dir",
        )
    }
    row.update({key: record.get(key) for key in SIGNAL_FIELDS})
    row["eval_points"] = (record.get("eval_points") or {}).get("evaluated", len(record["curve"]) - 2)
    for when in ("before", "after"):
        for domain, value in record[when].items():
            row[f"accuracy_{when}_{domain}"] = value
    row["accuracy_gain_overall"] = record["after"]["overall"] - record["before"]["overall"]
    return row


def write_results_csv(path: str, records: list[dict]) -> None:
    columns = results_columns(records)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for record in records:
            writer.writerow(result_row(record))


# --------------------------------------------------------------------------- statistics


def _by_strategy(records: list[dict], strategy: str) -> dict[int, dict]:
    return {r["seed"]: r for r in records if r["strategy"] == strategy}


def paired_difference(records: list[dict], strategy: str, baseline: str, domain: str = "overall") -> dict:
    """Per-seed `after` accuracy of `strategy` minus `baseline` (seeds both have), interval, p-value, verdict."""
    ours, theirs = _by_strategy(records, strategy), _by_strategy(records, baseline)
    seeds = sorted(set(ours) & set(theirs))
    differences = [ours[s]["after"].get(domain, math.nan) - theirs[s]["after"].get(domain, math.nan) for s in seeds]
    interval = stats.paired_bootstrap_interval(differences).clipped(-1.0, 1.0)  # differences of accuracies
    p_value = stats.sign_flip_pvalue(differences)
    return {
        "seeds": seeds,
        "differences": differences,
        "interval": interval,
        "p_value": p_value,
        "significant": stats.significant(interval, p_value),
    }


def verdict(paired: dict) -> str:
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


def method_text() -> str:
    """The statistical method, as documented in `compare.stats` (one source for code and report)."""
    doc = stats.__doc__ or ""
    marker = "Method (also written into every report):"
    return doc.split(marker, 1)[1].strip() if marker in doc else doc.strip()


# --------------------------------------------------------------------------- figures


X_LABELS = {"completions": "completions generated", "completion_tokens": "completion tokens generated"}


def plot_accuracy(
    path: str,
    records: list[dict],
    strategies: list[str],
    baseline: str | None = None,
    axis: str = "completions",
    levels: list[tuple[str, object]] = (),
) -> None:
    """Held-out accuracy against `axis` (a curve point field): mean over seeds, shaded 95% interval, and each
    named accuracy level of `levels` as a dashed horizontal line on the overall panel.

    The baseline is drawn as a thick black line under the others, so a strategy that matches it
    exactly stays visible on top of it. A strategy whose results did not record `axis` is left out.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["overall", *domains_of(records)]
    figure, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    drawn = 0
    for panel, domain in zip(axes[0], panels):
        for strategy in strategies:
            runs = list(_by_strategy(records, strategy).values())
            if not runs or not recorded(runs, axis):
                continue
            drawn += 1
            x, mean, low, high = mean_curve(runs, domain, axis)
            style = dict(color="black", linewidth=3.0, zorder=1) if strategy == baseline else dict(zorder=2)
            (line,) = panel.plot(x, mean, marker="o", markersize=3, label=strategy, **style)
            if len(runs) > 1:
                panel.fill_between(x, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        panel.set(title=f"held-out accuracy: {domain}", xlabel=X_LABELS.get(axis, axis), ylim=(-0.05, 1.05))
    for (name, level), color in zip(levels, ("dimgray", "firebrick")):
        mean_level = float(np.mean(list(level.values()))) if isinstance(level, dict) else float(level)
        axes[0][0].axhline(
            mean_level, color=color, linestyle="--", linewidth=1.2, zorder=0, label=f"{name} ({level_text(level)})"
        )
    if not drawn:  # results written before curve points recorded this axis
        axes[0][0].text(
            0.5,
            0.5,
            f"{X_LABELS.get(axis, axis)}:\nnot recorded in these results",
            ha="center",
            va="center",
            transform=axes[0][0].transAxes,
        )
    axes[0][0].set_ylabel("accuracy (mean over seeds, 95% band)")
    legend = None
    if axes[0][0].get_legend_handles_labels()[0]:  # below the panels, where it hides no curve
        legend = axes[0][0].legend(
            fontsize="small", loc="upper left", bbox_to_anchor=(0.0, -0.2), borderaxespad=0.0, frameon=False
        )
    figure.tight_layout()
    figure.savefig(path, dpi=80, bbox_inches="tight", bbox_extra_artists=[legend] if legend else None)
    plt.close(figure)


def _rolling(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or values.size == 0:
        return values
    kernel = np.ones(window)
    sums = np.convolve(values, kernel, mode="full")[: values.size]
    counts = np.convolve(np.ones(values.size), kernel, mode="full")[: values.size]
    return sums / counts


def plot_proportions(path: str, records: list[dict], strategies: list[str]) -> None:
    """Domain proportions over steps per strategy: sampled (solid, rolling mean) and mixer target (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = domains_of(records)
    colors = domain_colors(domains)
    figure, axes = plt.subplots(1, len(strategies), figsize=(3.6 * len(strategies), 3.4), squeeze=False)
    for axis, strategy in zip(axes[0], strategies):
        runs = list(_by_strategy(records, strategy).values())
        length = min((len(r["proportions"]) for r in runs), default=0)
        if length == 0:
            axis.set(title=strategy)
            continue
        steps = np.array([p["step"] for p in runs[0]["proportions"][:length]])
        window = max(1, length // 15)
        has_target = False
        for domain in domains:
            sampled = np.array([[r["proportions"][i]["sampled"].get(domain, 0.0) for i in range(length)] for r in runs])
            axis.plot(steps, _rolling(sampled.mean(axis=0), window), color=colors[domain], label=domain)
            targets = [[(r["proportions"][i]["target"] or {}).get(domain) for i in range(length)] for r in runs]
            target = np.array([[math.nan if v is None else v for v in row] for row in targets], dtype=float)
            if np.isfinite(target).any():
                has_target = True
                axis.plot(
                    steps,
                    np.nanmean(np.where(np.isfinite(target), target, np.nan), axis=0),
                    color=colors[domain],
                    linestyle="--",
                )
        note = "solid: sampled, dashed: target" if has_target else "sampled (no mixer target)"
        axis.set(title=f"{strategy}\n{note}", xlabel="step", ylim=(0, 1))
    axes[0][0].set_ylabel("share of prompts")
    axes[0][0].legend(fontsize="small", loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


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
            f"first step, or dynamic-sampling round, that reaches it; {round_text}):"
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
        f"- reward: {', '.join(f'`{reward_name(r)}`' for r in base.reward)}{weights}; a held-out completion is "
        f"correct when `{reward_name(base.reward[0])}` gives it at least {base.reward_threshold:g}"
    )


def comparison_warnings(settings, records: list[dict]) -> tuple[str | None, list[str]]:
    """`(all_equal, others)`: the all-equal-accuracies warning (which voids the paired verdicts), and the other
    health warnings (`health`): a reward that scored nothing, truncated completions, a held-out set too small for
    the differences measured."""
    all_equal = health.equal_accuracy_warning(records)
    unscored = health.unscored_reward_warning(records, settings)
    if all_equal:
        return all_equal, [w for w in [unscored, health.truncation_warning(records, settings)] if w]
    differences = {
        s: paired_difference(records, s, settings.baseline)["interval"].mean
        for s in settings.strategies
        if s != settings.baseline
    }
    others = [
        unscored,
        health.truncation_warning(records, settings),
        health.held_out_size_warning(records, settings, differences),
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
    base = settings.base
    built_in_model = f"the {base.suite} suite's built-in model"
    total_run_seconds = sum(r["wall_seconds"] for r in outcome.records)
    lines = [
        f"- command: `{settings.command}`" if settings.command else None,
        f"- model: {base.model or built_in_model}; data: {base.dataset or f'the built-in {base.suite} suite'}",
        f"- budget per run: `{settings.budget}` ({settings.completions_per_step} completions per step: "
        f"{base.prompts_per_step} prompts x {base.num_generations} generations, "
        f"{base.max_completion_length} tokens max)",
        f"- seeds: {', '.join(str(s) for s in sorted({r['seed'] for r in outcome.records}))} (same initial weights, "
        "data and reward noise for every strategy of a seed); baseline: `" + settings.baseline + "`",
        f"- held-out set: {held_out_sizes(outcome.records)}"
        + ("" if base.eval_dataset is None else f" from {base.eval_dataset}")
        + ", greedy decoding; accuracy is a fraction (0-1)",
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


def render_report(settings, outcome) -> str:
    """The markdown report: compute to reach the target accuracies first, then per-strategy intervals, paired
    differences to the baseline, figures, method."""
    records = outcome.records
    strategies = settings.strategies
    domains = domains_of(records)
    out = ["# Strategy comparison", "", *_settings_lines(settings, outcome), ""]
    degenerate, cautions = comparison_warnings(settings, records)
    for text in [degenerate, *cautions]:
        out += [f"> **Warning:** {text}.", ""] if text else []

    out += headline_section(
        records,
        strategies,
        settings.baseline,
        settings.target,
        "all held-out accuracies are equal (see the warning above)" if degenerate else None,
        settings.cost_model,
    )

    out += [
        "## Held-out accuracy after training",
        "",
        "Mean over seeds with the Student-t 95% interval `[low, high]`; `change` is after minus before.",
        "",
    ]
    header = [
        "strategy",
        "seeds",
        "overall",
        "change",
        *domains,
        "completions",
        "completion tokens",
        "kept fraction",
        "wall s/run",
        "completions per trained signal group",
        "completions in zero-signal groups",
    ]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for strategy in strategies:
        runs = list(_by_strategy(records, strategy).values())
        if not runs:
            continue
        overall = stats.accuracy_interval([r["after"]["overall"] for r in runs])
        change = stats.mean_interval([r["after"]["overall"] - r["before"]["overall"] for r in runs]).clipped(-1.0, 1.0)
        cells = [f"`{strategy}`", str(len(runs)), _fmt_interval(overall), _fmt_interval(change, signed=True)]
        cells += [_fmt(float(np.mean([r["after"].get(d, math.nan) for r in runs]))) for d in domains]
        cells += [
            f"{np.mean([r['completions'] for r in runs]):.0f}",
            f"{np.mean([r['completion_tokens'] for r in runs]):.0f}",
            _fmt(float(np.mean([r["kept_frac"] for r in runs])), 2),
            f"{np.mean([r['wall_seconds'] for r in runs]):.0f}",
        ]
        per_signal_group, zero_signal = signal_means(runs)
        cells += [_fmt(per_signal_group, 2), _fmt(zero_signal, 0)]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")

    others = [s for s in strategies if s != settings.baseline]
    if others:
        n_seeds = len(settings.seeds)
        out += [
            f"## Paired difference to the baseline `{settings.baseline}`",
            "",
            "Overall held-out accuracy after training, strategy minus baseline, paired by seed. "
            f"**significant** means the 95% paired interval excludes 0 and the sign-flip p-value is below "
            f"{stats.ALPHA:g}. With {n_seeds} seeds the smallest possible sign-flip p-value is "
            f"{_fmt(stats.min_attainable_pvalue(n_seeds))}"
            + (
                " (6 seeds or more can be significant)." if stats.min_attainable_pvalue(n_seeds) >= stats.ALPHA else "."
            ),
            "",
        ]
        header = ["strategy", "difference per seed", "mean [95% paired interval]", "sign-flip p", "verdict"]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for strategy in others:
            paired = paired_difference(records, strategy, settings.baseline)
            per_seed = ", ".join(f"{s}: {_fmt(d, signed=True)}" for s, d in zip(paired["seeds"], paired["differences"]))
            verdict_text = verdict(paired)
            p_value = _fmt(paired["p_value"])
            if len(paired["seeds"]) < 2:  # one pair: no interval, and a sign-flip test of one value says nothing
                verdict_text = p_value = "n/a (needs >= 2 seeds)"
            if degenerate:
                verdict_text = p_value = "n/a (all accuracies equal: see the warning above)"
            out.append(
                f"| `{strategy}` | {per_seed} | {_fmt_interval(paired['interval'], signed=True)} | "
                f"{p_value} | {verdict_text} |"
            )
        out.append("")
        out += [
            "Per domain (mean paired difference [95% interval]; `*` marks a significant difference, as above):",
            "",
        ]
        out += ["| strategy | " + " | ".join(domains) + " |", "|" + "---|" * (len(domains) + 1)]
        for strategy in others:
            cells = []
            for domain in domains:
                paired = paired_difference(records, strategy, settings.baseline, domain)
                cells.append(_fmt_interval(paired["interval"], signed=True) + (" *" if paired["significant"] else ""))
            out.append(f"| `{strategy}` | " + " | ".join(cells) + " |")
        out.append("")

    base_level, reach = reach_table(records, strategies, settings.baseline)
    if reach and not degenerate:  # reaching a level every run holds from the start says nothing
        out += [
            "## Secondary view (not the headline): completions for the seed-mean curve to reach the baseline's "
            f"final mean accuracy ({_fmt(base_level)})",
            "",
            "The first section is the answer; this table asks it of the curves averaged over seeds (evaluation "
            "points, linear in between) instead of each seed's own curve, so its numbers can differ from the "
            "first section's. The completions from which a seed-mean curve stays at or above the baseline's "
            "final mean; the baseline's own row is the reference. No interval: one curve per strategy.",
            "",
            *reach,
            "",
        ]

    notes = sorted({(r["strategy"], note) for r in records for note in r.get("notes", [])})
    if notes:
        out += ["## Warnings from the runs", ""]
        out += [f"- `{strategy}`: {note}" for strategy, note in notes]
        out.append("")

    out += [
        "## Figures",
        "",
        f"![held-out accuracy against completions generated]({FIGURES_FOLDER}/{ACCURACY_FIGURE})",
        "",
        f"![held-out accuracy against completion tokens generated]({FIGURES_FOLDER}/{TOKENS_FIGURE})",
        "",
        "Dashed lines: the accuracy levels of the first section.",
        "",
        f"![domain proportions over steps]({FIGURES_FOLDER}/{PROPORTIONS_FIGURE})",
        "",
        "## Method",
        "",
        method_text(),
        "",
        '- The "before" accuracy of a seed is the same for every strategy (same initial weights), so the '
        "paired difference of accuracies after training is also the paired difference of gains.",
        "- Completions are counted from TRL's generation schedule (`generation_batch_size` completions every "
        "`steps_per_generation * num_iterations` micro-steps); completion tokens from TRL's logged mean "
        "completion length. A strategy with dynamic sampling counts every round it generated "
        "(`dataflex/dynamic/generated`). A `completions:N` budget stops a run at the first step that reaches N, and "
        "a dynamic-sampling step at the first round that reaches it, so a run overshoots N by less than one "
        "generation round. Intermediate evaluations are planned in the budget's unit: at N/(k+1), 2N/(k+1), ... "
        "completions for a completions budget, whatever a step costs each strategy.",
        "- Optimizer steps are the trainer's. Trained tokens are the completion tokens of the responses the "
        "strategy kept in the loss (`dataflex/kept_tokens`, logged by the TRL adapter; without a strategy every "
        "generated response is trained). Generation seconds are the time in TRL's "
        "`_generate_and_score_completions` (generation, reward scoring, the log-probabilities computed there, the "
        "strategy's decision, every dynamic-sampling round); update seconds the rest of the training time "
        "(forward and backward passes, optimizer steps). A cost model's modelled cost is gen_token x generated "
        "tokens + train_token x trained tokens.",
        "- Completions per trained signal group: completions generated over the signal groups trained on "
        "(`dataflex/dynamic/signal_groups` with dynamic sampling; otherwise the generated groups whose rewards "
        "are not all equal, from TRL's `frac_reward_zero_std`). Completions in zero-signal groups: generated "
        "completions whose group's rewards were all equal (with dynamic sampling, as the strategy's select "
        "part judged them, every round included).",
        "- Runs of one invocation share the machine when `--jobs` > 1, so wall times are comparable only roughly.",
        "",
    ]
    return "\n".join(out)


def write_report(settings, outcome) -> dict[str, str]:
    """Write results.csv, report.md and the figures into the comparison folder; returns their paths."""
    folder = settings.output_dir
    figures = os.path.join(folder, FIGURES_FOLDER)
    os.makedirs(figures, exist_ok=True)
    paths = {
        "results": os.path.join(folder, RESULTS_FILE),
        "report": os.path.join(folder, REPORT_FILE),
        "accuracy_figure": os.path.join(figures, ACCURACY_FIGURE),
        "tokens_figure": os.path.join(figures, TOKENS_FIGURE),
        "proportions_figure": os.path.join(figures, PROPORTIONS_FIGURE),
    }
    write_results_csv(paths["results"], outcome.records)
    levels = reach_levels(outcome.records, settings.baseline, settings.target)
    for key, axis in (("accuracy_figure", "completions"), ("tokens_figure", "completion_tokens")):
        plot_accuracy(paths[key], outcome.records, settings.strategies, settings.baseline, axis, levels)
    plot_proportions(paths["proportions_figure"], outcome.records, settings.strategies)
    with open(paths["report"], "w") as handle:
        handle.write(render_report(settings, outcome))
    return paths
