"""One run of a comparison's grid: train it, summarise it into ``runs/<name>/result.json``, read it back.

Each finished run leaves its `result.json`, written atomically (temporary file + `os.replace`): a
run either has a complete result or none. A result that is unreadable or lacks a field counts as
missing, so the run is recomputed, with a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..held_out import SAMPLED, HeldOutEvaluation, HeldOutScores
from .budget import GenerationLedger, budget_callback
from .health import truncated_share
from .strategy_recipes import RECIPE_FLAG, recipe_text

if TYPE_CHECKING:  # pragma: no cover
    from .settings import CompareSettings, GridRun

RESULT_FILE = "result.json"


def write_json_atomic(path: str, data) -> None:
    """Write JSON so that `path` holds either the old content or the complete new one, never a partial file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temporary, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


# Every field `_summarize` writes, with its type: a result.json missing one or holding another type is recomputed.
RESULT_FIELDS = {
    "strategy": str,
    "seed": int,
    "name": str,
    "budget": str,
    "shared_key": str,
    "run_dir": str,
    "domains": list,
    "steps": int,
    "completions": int,
    "completion_tokens": int,
    "wall_seconds": (int, float),
    "kept_frac": (int, float),
    "before": dict,
    "after": dict,
    "headline": dict,
    "curve": list,
    "proportions": list,
}


def result_problem(record) -> str | None:
    """What is wrong with a loaded result record (a missing field, a wrong type), or None when it is complete."""
    if not isinstance(record, dict):
        return f"it holds a JSON {type(record).__name__}, not an object"
    for key, kind in RESULT_FIELDS.items():
        if key not in record:
            return f"it lacks the field {key!r}"
        if not isinstance(record[key], kind) or isinstance(record[key], bool):
            return f"its field {key!r} is a {type(record[key]).__name__}"
    for when in ("before", "after"):
        if not isinstance(record[when].get("overall"), (int, float)):
            return f"its {when!r} accuracy has no number 'overall'"
        if not isinstance(record["headline"].get(when), (int, float)):
            return f"its headline has no number {when!r}"
    # A curve point without "completion_tokens" or "wall_seconds" (written before they were recorded) is complete:
    # the report shows n/a for those axes rather than training the run again.
    for point in record["curve"]:
        if not (
            isinstance(point, dict)
            and {"step", "completions", "accuracy", "headline"} <= set(point)
            and isinstance(point["accuracy"], dict)
            and isinstance(point["headline"], (int, float))
        ):
            return "its accuracy curve has a malformed point"
    return None


def load_result(
    settings: CompareSettings, run: GridRun, on_warning: Callable[[str], None] | None = None
) -> dict | None:
    """The finished result of `run`, or None when it has none (or one made with other shared settings).

    A result file that cannot be read or lacks a field counts as missing (the run is recomputed);
    `on_warning` hears about it.
    """
    path = os.path.join(settings.run_dir(run), RESULT_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as handle:
            record = json.load(handle)
        problem = result_problem(record)
    except (OSError, ValueError) as error:
        problem = f"it cannot be read ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    if problem is not None:
        if on_warning is not None:
            on_warning(f"{path} is not a complete run result ({problem}); recomputing run {run.name}")
        return None
    if record.get("shared_key") != settings.shared_key():
        return None
    if record.get("recipe", {}) != dict(run.recipe):
        if on_warning is not None:
            on_warning(
                f"{path} was trained with the recipe {recipe_text(record.get('recipe')) or 'shared'!r}, not "
                f"{recipe_text(run.recipe) or 'shared'!r} ({RECIPE_FLAG}); recomputing run {run.name}"
            )
        return None
    if record.get("learning_rate", settings.base.learning_rate) != settings.learning_rate_of(run):
        return None  # a run of the learning-rate sweep trained at another rate
    if record["strategy"] != run.strategy or record["seed"] != run.seed:
        if on_warning is not None:
            on_warning(
                f"{path} holds the run {record['strategy']!r} seed {record['seed']}, not {run.name}; recomputing it"
            )
        return None
    return record


def _summarize(
    settings: CompareSettings,
    run: GridRun,
    result,
    ledger: GenerationLedger,
    curve: list[dict],
    train_seconds: float | None = None,
    seconds: dict | None = None,
) -> dict:
    """The run's result record. Its accuracy curve starts at step 0 (no completions, tokens or training time) and
    ends at the run's totals, each point with the held-out greedy accuracy, sampled pass@1 and headline
    (`HeldOutScores.curve_fields`); a point's ``wall_seconds`` is training time (`budget_callback`), the final one
    `train_seconds` (the whole run's `result.wall_seconds` when not given). `seconds`: the callback's final
    ``generation_seconds`` and ``update_seconds`` (`budget_callback`), when it timed generation."""
    domains = list(result.config.get("domains") or [])
    metrics = result.metrics
    kept = [m["kept_frac"] for m in metrics if m.get("kept_frac") is not None]
    final_step = ledger.steps or (metrics[-1]["step"] if metrics else 0)
    final_seconds = result.wall_seconds if train_seconds is None else train_seconds
    split = {k: v for k, v in (seconds or {}).items() if k in ("generation_seconds", "update_seconds")}
    points = _curve_points(result, ledger, curve, final_step, round(final_seconds, 3), split)
    planned = len(settings.eval_plan().thresholds())
    proportions = _proportions(metrics, domains)
    signal_groups = result.config.get("signal_groups_trained")
    return {
        "strategy": run.strategy,
        "seed": run.seed,
        "name": run.name,
        "learning_rate": settings.learning_rate_of(run),
        "recipe": dict(run.recipe),
        "budget": str(settings.budget),
        "shared_key": settings.shared_key(),
        "run_dir": result.output_dir,
        "domains": domains,
        # The held-out rows this run scored (a --dataset split is capped by the data's size, whatever --n-test asked).
        "held_out_rows": {
            "total": result.config.get("n_test_rows"),
            "per_domain": result.config.get("n_test_rows_per_domain") or {},
        },
        "steps": final_step,
        # Completions generated (every dynamic-sampling round, every allocation pilot and commit), and the earlier
        # responses an allocation part reused in its groups, apart: trained, but not generated (no generation cost).
        "completions": ledger.completions,
        "reused_responses": ledger.reused_responses,
        # Completions beyond a completions budget (None for a steps budget) and one generation round's
        # completions: a run stops within one round of its budget.
        "overshoot": ledger.overshoot,
        "round_completions": ledger.round_size,
        # Intermediate evaluations planned, and how many the curve has (a step that generated more than the
        # plan's spacing serves several thresholds with one evaluation).
        "eval_points": {"planned": planned, "evaluated": len(points) - 2},
        "completion_tokens": int(round(ledger.completion_tokens)),
        # Completion tokens of the responses the strategy kept in the loss (`GenerationLedger.record_trained`).
        "trained_tokens": int(round(ledger.trained_tokens)),
        # Trained signal groups and completions in zero-signal groups (runner.signal_accounting); None when the
        # run's logs could not tell them.
        "signal_groups": signal_groups,
        "zero_signal_completions": result.config.get("zero_signal_completions"),
        "completions_per_signal_group": ledger.completions / signal_groups if signal_groups else None,
        # Training completions no reward function scored (None or NaN from each); None with the built-in verifier.
        "unscored_completions": result.config.get("unscored_completions"),
        "wall_seconds": round(result.wall_seconds, 3),
        # Training seconds in generation and in the update (`budget_callback`); None where generation was not timed.
        "generation_seconds": split.get("generation_seconds"),
        "update_seconds": split.get("update_seconds"),
        "kept_frac": sum(kept) / len(kept) if kept else 1.0,
        # Share of training completions cut at max_completion_length (TRL's clipped_ratio, mean over steps).
        "truncated_share": truncated_share(metrics),
        # Held-out greedy accuracy, sampled pass@1 (k, temperature, before, after; None with --eval-samples 0) and
        # the headline (what it measures, before, after: held_out.Headline.record), as in the run's eval.json.
        "before": result.eval_before,
        "after": result.eval_after,
        SAMPLED: result.sampled,
        "headline": result.headline,
        "curve": points,
        "proportions": proportions,
    }


def _curve_points(
    result, ledger: GenerationLedger, curve: list[dict], final_step: int, final_seconds: float, split: dict
) -> list[dict]:
    """The accuracy curve of a result record: step 0 (before training), the callback's points, the run's totals."""
    sampled = result.sampled or {}
    greedy = {"before": result.eval_before, "after": result.eval_after}

    def scores(when: str) -> dict:
        return HeldOutScores(greedy[when], sampled.get(when), result.headline[when]).curve_fields()

    points = [
        {
            "step": 0,
            "completions": 0,
            "completion_tokens": 0,
            "trained_tokens": 0,
            "wall_seconds": 0.0,
            **{k: 0.0 for k in split},
            **scores("before"),
        }
    ]
    points += [p for p in curve if p["step"] < final_step]
    points.append(
        {
            "step": final_step,
            "completions": ledger.completions,
            "completion_tokens": int(round(ledger.completion_tokens)),
            "trained_tokens": int(round(ledger.trained_tokens)),
            "wall_seconds": final_seconds,
            **split,
            **scores("after"),
        }
    )
    return points


def _proportions(metrics: list[dict], domains: list[str]) -> list[dict]:
    """Each step's sampled and target domain proportions (the target None while the mix part set none)."""
    proportions = []
    for m in metrics:
        target = {d: m.get(f"dataflex/mix/target/{d}") for d in domains}
        proportions.append(
            {
                "step": m["step"],
                "sampled": {d: m.get(f"mix/actual/{d}") or 0.0 for d in domains},
                "target": target if any(v is not None for v in target.values()) else None,
            }
        )
    return proportions


def execute_run(
    settings: CompareSettings, run: GridRun, fewer_per_step: bool = False, on_step: Callable[[int], None] | None = None
) -> dict:
    """Train one grid run, write its `result.json` atomically and return the result record: a TRL run of
    `dataflex run`, or a call of the comparison's training function (`training_run.execute_training_run`)."""
    if settings.train is not None:
        from .training_run import train_run

        record = train_run(settings, run)
        write_json_atomic(os.path.join(settings.run_dir(run), RESULT_FILE), record)
        return record
    from dataflex_callbacks.recipes.run_inputs import load_data
    from dataflex_callbacks.recipes.runner import run_training

    options = settings.options_for(run, fewer_per_step)
    data = load_data(options)
    evaluate = HeldOutEvaluation(options, data.test, data.reward_settings)

    ledger = GenerationLedger(settings.budget)
    callback = budget_callback(ledger, evaluate, settings.eval_points, on_step)
    with warnings.catch_warnings(record=True) as caught:
        # Caught, not printed: repeated by every run they would bury the progress bar. The library's own
        # warnings (e.g. a mixer whose targets the sampler does not follow) go into the report instead.
        warnings.simplefilter("always")
        result = run_training(options, callbacks=[callback])
    record = _summarize(settings, run, result, ledger, callback.curve, callback.train_seconds(), callback.seconds())
    notes = {str(w.message).strip() for w in caught if str(w.message).startswith("dataflex")}
    record["notes"] = sorted(notes)
    write_json_atomic(os.path.join(settings.run_dir(run), RESULT_FILE), record)
    return record
