"""A comparison's figures: held-out accuracy against optimizer steps, completions and generated tokens (the headline
first, then greedy accuracy, then each domain), and the domain proportions over steps."""

from __future__ import annotations

import math
import os

import numpy as np

from ..held_out import SAMPLED
from ..run_folder import domain_colors
from .reach import headline_value, level_text, logged_headline, mean_curve, recorded, runs_by_seed

FIGURES_FOLDER = "figures"
ACCURACY_FIGURES = {
    "step": "accuracy_vs_steps.png",
    "completions": "accuracy_vs_completions.png",
    "completion_tokens": "accuracy_vs_tokens.png",
}
"""Curve point field -> the file of the accuracy figure drawn against it."""
PROPORTIONS_FIGURE = "domain_proportions.png"
SEED_CURVES_UP_TO = 3
"""Up to this many seeds a strategy's figure shows each seed's curve and no band: the Student-t 95% band of 2-3 seeds
(t(1) = 12.7, t(2) = 4.3) spans most of the axis and hides the curves. From one seed more on, the band."""
PANELS_PER_ROW = 3  # the accuracy figures' grid
X_LABELS = {
    "step": "optimizer steps",
    "completions": "completions generated",
    "completion_tokens": "completion tokens generated",
}


def domains_of(records: list[dict]) -> list[str]:
    """Domains evaluated in any run, sorted (without `overall`)."""
    return sorted({d for r in records for d in r["after"] if d != "overall"})


def accuracy_panels(records: list[dict]) -> list[tuple[str, object]]:
    """The accuracy figure's panels, `(title, value of a curve point)`: the headline, greedy accuracy overall, then
    each domain in the headline's metric (sampled pass@1; greedy accuracy with ``--eval-samples 0``)."""
    sampled = all(r["headline"]["metric"] == SAMPLED for r in records)
    key, name = (SAMPLED, "sampled pass@1") if sampled else ("accuracy", "greedy accuracy")

    def figure(field: str, domain: str):
        return lambda point: float((point.get(field) or {}).get(domain, math.nan))

    if logged_headline(records):  # a training function's: one logged score
        return [("logged accuracy", headline_value)] + [
            (f"logged accuracy: {domain}", figure("accuracy", domain)) for domain in domains_of(records)
        ]

    panels = [("headline", headline_value), ("greedy accuracy: overall", figure("accuracy", "overall"))]
    return panels + [(f"{name}: {domain}", figure(key, domain)) for domain in domains_of(records)]


def plot_accuracy(
    path: str,
    records: list[dict],
    strategies: list[str],
    baseline: str | None = None,
    axis: str = "completions",
    levels: list[tuple[str, object]] = (),
) -> None:
    """Held-out accuracy against `axis` (a curve point field), one panel per `accuracy_panels`: mean over seeds with,
    up to `SEED_CURVES_UP_TO` seeds, each seed's curve (thin, the strategy's colour), from more seeds on the shaded
    95% interval; each named level of `levels` as a dashed horizontal line on the headline panel.

    The baseline is drawn as a thick black line under the others, so a strategy that matches it
    exactly stays visible on top of it. A strategy whose results did not record `axis` is left out.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = accuracy_panels(records)
    # A grid of at most 3 panels a row: the headline first, then greedy overall, then each level.
    columns = min(PANELS_PER_ROW, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for unused in axes.flat[len(panels) :]:
        unused.set_visible(False)
    drawn = 0
    for panel, (title, value) in zip(axes.flat, panels, strict=False):  # the grid may hold unused axes
        for strategy in strategies:
            runs = list(runs_by_seed(records, strategy).values())
            if not runs or not recorded(runs, axis):
                continue
            drawn += 1
            x, mean, low, high = mean_curve(runs, axis, value)
            style = dict(color="black", linewidth=3.0, zorder=1) if strategy == baseline else dict(zorder=2)
            (line,) = panel.plot(x, mean, marker="o", markersize=3, label=strategy, **style)
            if len(runs) > SEED_CURVES_UP_TO:
                panel.fill_between(x, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
            elif len(runs) > 1:  # one seed's curve is the mean itself
                for run in runs:
                    seed_x = [point[axis] for point in run["curve"]]
                    seed_y = [value(point) for point in run["curve"]]
                    # "_" keeps the seed curves out of the legend, which names each strategy once.
                    panel.plot(
                        seed_x,
                        seed_y,
                        color=line.get_color(),
                        linewidth=0.7,
                        alpha=0.6,
                        zorder=0,
                        label=f"_{strategy} seed {run['seed']}",
                    )
        panel.set(title=title, xlabel=X_LABELS.get(axis, axis), ylim=(-0.05, 1.05))
    for (name, level), color in zip(levels, ("dimgray", "firebrick"), strict=False):  # one or two levels
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
    seeds = max((len(runs_by_seed(records, s)) for s in strategies), default=0)
    band = "95% band" if seeds > SEED_CURVES_UP_TO else "thin: each seed"
    axes[0][0].set_ylabel(f"held-out (mean over seeds; {band})")
    legend = None
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:  # below the panels, where it hides no curve
        legend = figure.legend(
            handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(0.0, 0.0), frameon=False
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
    for axis, strategy in zip(axes[0], strategies, strict=True):
        runs = list(runs_by_seed(records, strategy).values())
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
    if axes[0][0].get_legend_handles_labels()[0]:  # no domain drawn (no run recorded proportions): no legend
        axes[0][0].legend(fontsize="small", loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def write_figures(folder: str, records: list[dict], strategies: list[str], baseline: str, levels) -> dict[str, str]:
    """Write every figure into `folder`: accuracy against each axis of `ACCURACY_FIGURES` (`levels` dashed) and
    the domain proportions; returns `file name -> path`."""
    os.makedirs(folder, exist_ok=True)
    paths = {name: os.path.join(folder, name) for name in [*ACCURACY_FIGURES.values(), PROPORTIONS_FIGURE]}
    for axis, name in ACCURACY_FIGURES.items():
        plot_accuracy(paths[name], records, strategies, baseline, axis, levels)
    plot_proportions(paths[PROPORTIONS_FIGURE], records, strategies)
    return paths
