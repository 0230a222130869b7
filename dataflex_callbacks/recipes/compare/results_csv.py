"""A comparison's `results.csv`: one row per run, its budget use in every unit, headline and held-out accuracy per
domain, and with a baseline the compute to reach each level."""

from __future__ import annotations

import csv

from ..held_out import SAMPLED
from .decomposition import decomposition_column_names, decomposition_columns
from .figures import domains_of
from .reach import reach_column_names, reach_columns
from .strategy_recipes import recipe_text

RESULTS_FILE = "results.csv"
RUN_COLUMNS = (
    "strategy",
    "seed",
    "budget",
    "recipe",
    "steps",
    "completions",
    "reused_responses",
    "completion_tokens",
    "trained_tokens",
    "generation_seconds",
    "update_seconds",
    "wall_seconds",
    "kept_frac",
    "headline_metric",
    "headline_before",
    "headline_after",
    "headline_gain",
    "accuracy_before_overall",
    "accuracy_after_overall",
    "accuracy_gain_overall",
    "signal_groups",
    "zero_signal_completions",
    "completions_per_signal_group",
    "overshoot",
    "eval_points",
)
OPTIONAL_FIELDS = (
    "reused_responses",
    "trained_tokens",
    "generation_seconds",
    "update_seconds",
    "signal_groups",
    "zero_signal_completions",
    "completions_per_signal_group",
    "overshoot",
)
"""Per-run fields a result may lack (written before they existed, or not measured: generation untimed); the
report and results.csv show n/a or leave them empty."""


def results_columns(records: list[dict], baseline: str | None = None, target: float | None = None) -> list[str]:
    """results.csv's columns: `RUN_COLUMNS`, then greedy accuracy and sampled pass@1 per domain, then with a
    `baseline` the compute to reach each level and whether it was censored (`reach.reach_columns`) and its per-step
    cost and step reduction (`decomposition.decomposition_columns`), then the run folder."""
    domains = domains_of(records)
    greedy = [f"accuracy_{when}_{d}" for d in domains for when in ("before", "after")]
    sampled = [f"{SAMPLED}_{when}_{d}" for d in ["overall", *domains] for when in ("before", "after")]
    reach = [*reach_column_names(target), *decomposition_column_names(target)] if baseline is not None else []
    return [*RUN_COLUMNS, *greedy, *(sampled if any(r.get(SAMPLED) for r in records) else []), *reach, "run_dir"]


def result_row(record: dict) -> dict:
    """One results.csv row: a run's budget use in every unit, its headline, and its held-out greedy accuracy and
    sampled pass@1 per domain, before and after."""
    row = {
        key: record[key]
        for key in ("strategy", "seed", "budget", "steps", "completions", "completion_tokens", "wall_seconds")
    }
    row.update({key: record.get(key) for key in OPTIONAL_FIELDS})
    row.update(kept_frac=record["kept_frac"], run_dir=record["run_dir"], recipe=recipe_text(record.get("recipe")))
    row["eval_points"] = (record.get("eval_points") or {}).get("evaluated", len(record["curve"]) - 2)
    headline = record["headline"]
    row.update(
        headline_metric=headline["metric"],
        headline_before=headline["before"],
        headline_after=headline["after"],
        headline_gain=headline["after"] - headline["before"],
    )
    sampled = record.get(SAMPLED) or {}
    for when in ("before", "after"):
        for domain, value in record[when].items():
            row[f"accuracy_{when}_{domain}"] = value
        for domain, value in (sampled.get(when) or {}).items():
            row[f"{SAMPLED}_{when}_{domain}"] = value
    row["accuracy_gain_overall"] = record["after"]["overall"] - record["before"]["overall"]
    return row


def write_results_csv(
    path: str,
    records: list[dict],
    baseline: str | None = None,
    target: float | None = None,
    extra: dict[str, dict] | None = None,
    extra_columns: list[str] = (),
) -> None:
    """Write results.csv, one row per run (`result_row`); with a `baseline`, each run's compute to reach the
    baseline's final headline on its seed (and `target`), a censored run's at what it spent with
    ``reach_<level>_censored`` True, and its per-step cost x step reduction against the baseline's run
    (`decomposition.decomposition_columns`); `extra` (run name -> column -> value, in `extra_columns`, before the run
    folder) the learning-rate sweep's cells (`tuning.tuning_columns`)."""
    columns = results_columns(records, baseline, target)
    columns[-1:-1] = list(extra_columns)
    reach = reach_columns(records, baseline, target) if baseline is not None else {}
    decomposed = decomposition_columns(records, baseline, target) if baseline is not None else {}
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for record in records:
            cells = {
                **reach.get(record["name"], {}),
                **decomposed.get(record["name"], {}),
                **(extra or {}).get(record["name"], {}),
            }
            writer.writerow({**result_row(record), **cells})
