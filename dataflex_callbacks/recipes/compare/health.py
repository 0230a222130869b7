"""Checks that a comparison can answer its question: equal accuracies, completions cut short, a small held-out set.

Each check reads the per-run result records and returns a warning (one sentence naming the figures
and the fix) or None. The report puts every warning above its tables and the console prints it, so
a grid that cannot separate strategies never reads as a plain "not significant".

- **All accuracies equal.** Every held-out figure of every run (greedy accuracy, sampled pass@1, the headline)
  the same number: nothing separates the strategies, whatever a paired test says (the report then gives no
  verdicts).
- **A reward that scores nothing.** A run whose reward functions gave no number (None or NaN from
  every one) to any of its training completions learnt nothing from them: TRL trains such groups
  with zero advantage, and none counts as a signal group.
- **A greedy headline.** With ``--eval-samples 0`` the headline falls back from sampled pass@1 to greedy
  accuracy (`held_out.fallback_warning`), which moves later: the comparison says so instead of switching silently.
- **Truncated completions.** A run whose training completions end at `max_completion_length`
  without an end-of-sequence token in more than `TRUNCATION_LIMIT` of cases (TRL's
  ``completions/clipped_ratio``, averaged over the run's steps) is flagged: its rewards score
  unfinished answers. The toy suite (`--suite toy`) is exempt: its completions are sized to its
  answers, which its verifier reads from the first tokens (the testbed's answers end with end-of-sequence).
- **Held-out set too small.** One run's headline ``p`` on its ``n`` held-out prompts carries evaluation
  noise ``sd <= sqrt(p (1 - p) / n)`` (binomial for greedy accuracy; for sampled pass@1, a mean of per-prompt
  pass rates in [0, 1], at most that); the difference of two runs on the same prompts about ``sqrt(2) sd``.
  When that noise, doubled (a 95% band), is larger than the largest mean paired difference the grid measured
  (at least `RESOLUTION_FLOOR`), the held-out set cannot tell the strategies apart, and the warning gives the
  size that would: ``n = 8 p (1 - p) / d^2``.
"""

from __future__ import annotations

import math

from ..held_out import SAMPLED, fallback_warning

TRUNCATION_LIMIT = 0.5
"""Share of truncated training completions above which a run is flagged."""
RESOLUTION_FLOOR = 0.02
"""The smallest difference in held-out accuracy the size advice aims to resolve (2 points)."""
CLIPPED_KEY = "completions/clipped_ratio"


def equal_accuracy_warning(records: list[dict]) -> str | None:
    """A warning when every held-out figure of every run (greedy accuracy and sampled pass@1 per domain, the
    headline; before, after, each curve point) is the same number, or None: such a grid cannot separate strategies,
    whatever the paired test says."""
    values = set()
    for record in records:
        sampled = record.get(SAMPLED) or {}
        figures = [record["before"], record["after"], sampled.get("before") or {}, sampled.get("after") or {}]
        for point in record.get("curve", []):
            figures += [point["accuracy"], point.get(SAMPLED) or {}, {"headline": point.get("headline")}]
        figures.append({when: record.get("headline", {}).get(when) for when in ("before", "after")})
        for figure in figures:
            values.update(round(float(v), 12) for v in figure.values() if isinstance(v, (int, float)))
    if len(values) != 1 or len(records) < 2:
        return None
    return (
        f"all held-out accuracies are equal ({next(iter(values)):.3f} for every run, before and after "
        "training): the comparison cannot separate strategies; likely causes: completions cut short by the model's "
        "positions or --max-completion-length (raise it), a held-out rule no completion meets (check "
        "--reward-threshold or --verifier on a few completions), a model too weak or a budget too small for the "
        "task (a stronger --model, a larger --budget), or a held-out set too small (more rows or --n-test)"
    )


def budget_use_warning(records: list[dict]) -> str | None:
    """A warning naming the runs of a training function that stopped short of the budget or went past it by more than
    one step's completions (their result's ``budget_problem``), or None: such runs did not spend the same compute as
    the runs they are paired with."""
    flagged = [f"{r['name']} {r['budget_problem']}" for r in records if r.get("budget_problem")]
    if not flagged:
        return None
    return (
        f"{len(flagged)} of {len(records)} runs did not spend the budget they are compared at ({'; '.join(flagged)}), "
        "so their pairs compare different compute; stop the loop once run.budget_spent() is True (and not "
        "before), then rerun with --overwrite"
    )


def greedy_headline_warning(records: list[dict]) -> str | None:
    """The warning that the runs' headline fell back to greedy accuracy (``--eval-samples 0``), or None."""
    return fallback_warning(records[0]["headline"]) if records else None


def unscored_reward_warning(records: list[dict], settings) -> str | None:
    """A warning naming the runs whose reward scored none of their training completions (None or NaN for each), or
    None; runs with the built-in verifier (no ``unscored_completions``) are never flagged."""
    empty = [
        r["name"]
        for r in records
        if isinstance(r.get("unscored_completions"), int)
        and r.get("completions")
        and r["unscored_completions"] >= r["completions"]
    ]
    if not empty:
        return None
    from ..options import reward_name

    rewards = ", ".join(f"`{reward_name(r)}`" for r in settings.base.reward or [])
    names = ", ".join(empty[:6]) + (f" and {len(empty) - 6} more" if len(empty) > 6 else "")
    return (
        f"the reward {rewards} scored none of the training completions of {len(empty)} of {len(records)} runs "
        f"({names}): it returned None or NaN for every one, so no group carried a learning signal (none is counted "
        "as a signal group) and those runs learnt nothing from the reward; call it on a few completions of your "
        "data and check it returns a number for each"
    )


def truncated_share(metrics: list[dict]) -> float | None:
    """Mean over a run's logged steps of TRL's share of completions cut at `max_completion_length`; None if unlogged."""
    values = [float(m[CLIPPED_KEY]) for m in metrics if isinstance(m.get(CLIPPED_KEY), (int, float))]
    values = [v for v in values if math.isfinite(v)]
    return sum(values) / len(values) if values else None


def truncation_warning(records: list[dict], settings) -> str | None:
    """A warning naming the runs whose training completions were mostly cut short, or None."""
    if settings.base.dataset is None and settings.base.suite == "toy":  # its completions are sized to its answers
        return None
    cut = [
        (r["name"], r["truncated_share"])
        for r in records
        if isinstance(r.get("truncated_share"), (int, float)) and r["truncated_share"] > TRUNCATION_LIMIT
    ]
    if not cut:
        return None
    worst = max(share for _, share in cut)
    names = ", ".join(name for name, _ in cut[:6]) + (f" and {len(cut) - 6} more" if len(cut) > 6 else "")
    return (
        f"{len(cut)} of {len(records)} runs had more than {TRUNCATION_LIMIT:.0%} of their training completions cut "
        f"at --max-completion-length {settings.base.max_completion_length} tokens (up to {worst:.0%}: {names}); "
        "their rewards scored unfinished answers; raise --max-completion-length (within the model's positions), "
        "or shorten the answers the prompts ask for"
    )


def _headline_rows(records: list[dict]) -> int | None:
    sizes = [r["headline"].get("rows") for r in records]
    sizes = [n for n in sizes if isinstance(n, int) and n > 0]
    return min(sizes) if sizes else None


def held_out_noise(accuracy: float, rows: int) -> float:
    """Half-width of the 95% band of evaluation noise on the difference of two runs scored on `rows` prompts."""
    p = min(max(float(accuracy), 0.0), 1.0)
    return 2.0 * math.sqrt(2.0 * p * (1.0 - p) / rows)


def rows_to_resolve(accuracy: float, difference: float) -> int:
    """Held-out prompts whose evaluation noise band is `difference` at `accuracy`: ``8 p (1 - p) / d^2``."""
    p = min(max(float(accuracy), 0.0), 1.0)
    return max(1, math.ceil(8.0 * p * (1.0 - p) / difference**2))


def held_out_size_warning(records: list[dict], settings, differences: dict[str, float]) -> str | None:
    """A warning when the evaluation noise of the headline's held-out prompts is larger than the differences the grid
    measured, or None.

    Args:
        records: the runs' result records (their ``headline``: its ``rows`` and ``after``).
        settings: the comparison's settings (for the flags named in the fix).
        differences: per strategy, its mean paired difference in the headline to the baseline.
    """
    rows = _headline_rows(records)
    finite = [abs(d) for d in differences.values() if isinstance(d, (int, float)) and math.isfinite(d)]
    if rows is None or not finite:
        return None
    accuracy = sum(r["headline"]["after"] for r in records) / len(records)
    noise = held_out_noise(accuracy, rows)
    measured = max(max(finite), RESOLUTION_FLOOR)
    if noise <= measured or noise == 0.0:
        return None
    needed = rows_to_resolve(accuracy, measured)
    fix = (
        "pass a larger --eval-dataset"
        if settings.base.eval_dataset is not None
        else "raise --n-test (with --dataset: add rows, or pass --eval-dataset)"
    )
    return (
        f"the headline's held-out prompts ({rows}, mean headline {accuracy:.2f}) carry evaluation noise of "
        f"±{noise:.3f} on a difference between two runs, more than the largest difference measured "
        f"({max(finite):.3f}): it cannot separate these strategies; about {needed} held-out prompts would resolve "
        f"a difference of {measured:.3f}; {fix}"
    )
