"""Flag a headline difference the held-out evaluation's own noise could make: the binomial noise of the headline.

One run's headline is sampled pass@1 over ``rows`` held-out prompts with ``k`` samples each (its ``headline``
block: ``rows``, ``k``; greedy accuracy counts one completion per prompt): a mean of ``rows x k`` pass/fail
outcomes, whose binomial standard error at its value ``p`` is ``sqrt(p (1 - p) / (rows k))``. On fixed prompts
whose pass rates differ this is an upper bound of the sampling noise (a mean of Bernoulli outcomes with unequal
rates varies less than one with their mean rate). A paired difference of two runs carries both runs' noise,
``sqrt(SE_a^2 + SE_b^2)``, and the mean of the paired differences over ``S`` seeds
``sqrt(sum over seeds of SE_a^2 + SE_b^2) / S``. A mean difference within twice that (a 95% band) is one the
evaluation alone could produce, and the report and the console warn about it.
"""

from __future__ import annotations

import math

from .reach import runs_by_seed

NOISE_BANDS = 2.0
"""A headline difference within this many standard errors of evaluation noise is flagged."""


def headline_samples(block: dict) -> int | None:
    """The pass/fail outcomes one evaluation of a headline (eval.json's ``headline``) averages: prompts x samples per
    prompt (one for a greedy headline); None when the result did not record its prompts."""
    rows, k = block.get("rows"), block.get("k") or 1
    if not isinstance(rows, int) or rows <= 0:
        return None
    return rows * int(k)


def headline_standard_error(block: dict, when: str = "after") -> float:
    """The binomial standard error of a run's headline `when` (``before`` or ``after``): ``sqrt(p (1 - p) / (rows
    k))``; NaN when the prompts were not recorded."""
    samples = headline_samples(block)
    if samples is None:
        return math.nan
    p = min(max(float(block[when]), 0.0), 1.0)
    return math.sqrt(p * (1.0 - p) / samples)


def difference_noise(records: list[dict], strategy: str, baseline: str) -> float:
    """The evaluation noise (standard error) of `strategy`'s mean paired headline difference to `baseline` after
    training, over the seeds both ran; NaN without such seeds or recorded prompts."""
    ours, theirs = runs_by_seed(records, strategy), runs_by_seed(records, baseline)
    seeds = sorted(set(ours) & set(theirs))
    if not seeds:
        return math.nan
    variance = sum(
        headline_standard_error(ours[s]["headline"]) ** 2 + headline_standard_error(theirs[s]["headline"]) ** 2
        for s in seeds
    )
    return math.sqrt(variance) / len(seeds)


def within_noise(difference: float, noise: float) -> bool:
    """Whether a mean headline difference is within `NOISE_BANDS` standard errors of evaluation noise."""
    return math.isfinite(difference) and math.isfinite(noise) and abs(difference) <= NOISE_BANDS * noise


def noise_text(records: list[dict]) -> str:
    """What one run's evaluation averages: `100 prompts x 4 samples`, or the range over runs where they differ."""
    counts = sorted({(r["headline"].get("rows"), r["headline"].get("k") or 1) for r in records})
    return "; ".join(f"{rows} prompts x {k} sample{'s' if k != 1 else ''}" for rows, k in counts)


def evaluation_noise_warning(records: list[dict], baseline: str, differences: dict[str, float]) -> str | None:
    """A warning naming each strategy whose mean paired headline difference to `baseline` (`differences`: strategy
    -> mean difference) is within twice its evaluation noise (`difference_noise`), or None."""
    flagged = []
    for strategy, difference in differences.items():
        noise = difference_noise(records, strategy, baseline)
        if within_noise(difference, noise):
            flagged.append(f"`{strategy}` {difference:+.3f} (2 SE: ±{NOISE_BANDS * noise:.3f})")
    if not flagged:
        return None
    return (
        f"the headline difference to the baseline of {', '.join(flagged)} is within twice the evaluation noise "
        f"(the binomial standard error of each run's headline over {noise_text(records)}, both runs of each seed, "
        "averaged over the seeds): the held-out evaluation alone could make it; more held-out prompts (`--n-test`) "
        "or samples per prompt (`--eval-samples`) shrink that noise"
    )
