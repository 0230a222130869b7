"""Statistics for comparing strategies across seeds: intervals and a paired test.

Method (also written into every report):

- Per strategy: mean over seeds with a Student-t 95% interval, ``mean ± t(n-1) * sd / sqrt(n)``.
- Against the baseline, paired by seed (same initial weights and data): the per-seed
  differences ``d_s``; a paired bootstrap (seeds resampled with replacement) estimates the
  standard error of their mean, corrected by ``sqrt(n / (n - 1))`` for the plug-in bias, and the
  interval is ``mean(d) ± t(n-1) * SE``. A plain percentile bootstrap covers far below 95% with
  the 3-5 seeds people can afford; Student-t critical values keep coverage near nominal. The report
  prints the paired SE beside each difference: it is the comparison's resolution (a difference of
  0.02 is resolved when ``t(n-1) * SE`` is below 0.02).
- A paired sign-flip permutation test (exact over all ``2^n`` sign patterns for n <= 16,
  otherwise 20,000 random patterns). With n seeds the smallest attainable two-sided p-value is
  ``2 / 2^n`` (0.25 for 3 seeds): few seeds cannot show significance with this test, by design.
- "significant" means both: the paired interval excludes 0 and the sign-flip p-value is below 0.05
  (`significant`). The interval alone can claim too much with few seeds: with 2 seeds whose differences
  are equal its width is 0, while the sign-flip test cannot go below p = 0.5. So fewer than 6 seeds are
  never significant (their smallest p is 0.0625 or more); an interval that excludes 0 without a small
  enough p is reported as such.
- Accuracy intervals are clipped to [0, 1], and intervals of accuracy differences to [-1, 1]: with
  3 seeds ``t(2) = 4.30`` can stretch a t interval past the values an accuracy can take, and the
  clipped interval covers whatever the unclipped one covered.
- Compute to reach an accuracy level (the report's first table): per seed, on that seed's own
  headline curve (linear between evaluation points), the completions, generated tokens or
  training seconds from which the curve stays at or above the level (its last crossing from
  below); a curve that ends below the level is censored: that seed needs more than its run spent.
  Per strategy: the mean over seeds with the Student-t interval when every seed reached the level
  (cut at 0, since no cost is negative); otherwise ``> mean``, each censored seed counted at what
  its run spent (a lower bound), with every seed's figure. Against the baseline: per seed the ratio
  strategy / baseline; the paired bootstrap interval above is taken on the log-ratios and
  exponentiated, so the figure is a geometric-mean ratio (below 1: the strategy needs less) with a
  paired 95% interval. A censored run enters its pair at what it spent, so the ratio is a bound: a
  lower bound (and the interval's low end one, its high end unknown) when the strategy's run is
  censored, an upper bound (and the high end one) when the baseline's is; a seed where both are
  censored, or censoring both ways, bounds nothing, and no seed is dropped. A bound is never
  counted as a saving.
  Log-ratios, not differences: the question is "how many times less compute", a ratio reads the
  same in completions, tokens and seconds, and the log makes 0.5x and 2x symmetric.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from dataflex_callbacks.errors import ArgumentError

# Two-sided 95% Student-t critical values t(0.975, df) for df = 1..30.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t_critical(df: int) -> float:
    """Two-sided 95% Student-t critical value; a Cornish-Fisher expansion beyond df = 30."""
    if df < 1:
        return float("nan")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.n >= 2 and (self.low > 0 or self.high < 0)

    def clipped(self, low: float, high: float) -> Interval:
        """The interval cut to `[low, high]`, the values the quantity can take (an accuracy: [0, 1])."""
        return Interval(self.mean, min(max(self.low, low), high), max(min(self.high, high), low), self.n)


def accuracy_interval(values) -> Interval:
    """`mean_interval` of accuracies, clipped to [0, 1]."""
    return mean_interval(values).clipped(0.0, 1.0)


def mean_interval(values) -> Interval:
    """Mean with a Student-t 95% interval (NaN bounds with fewer than 2 values)."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, float("nan"), float("nan"), n)
    half = t_critical(n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_standard_error(differences, resamples: int = 10_000, seed: int = 0) -> float:
    """Standard error of the mean paired difference over seeds: the standard deviation of the mean over `resamples`
    bootstrap resamples of the seeds, corrected by ``sqrt(n / (n - 1))`` for the plug-in bias (close to
    ``sd(d) / sqrt(n)``); NaN with fewer than 2 differences. The resolution of a comparison: its paired 95% interval
    is ``mean(d) ± t(n-1) * SE`` (`paired_bootstrap_interval`)."""
    d = np.asarray(differences, dtype=np.float64)
    n = d.size
    if n < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    return float(means.std(ddof=1)) * math.sqrt(n / (n - 1))


def paired_bootstrap_interval(differences, resamples: int = 10_000, seed: int = 0) -> Interval:
    """Interval for the mean paired difference: bootstrap standard error (`paired_standard_error`), Student-t
    critical value."""
    d = np.asarray(differences, dtype=np.float64)
    n = d.size
    if n < 2:
        mean = float(d.mean()) if n else float("nan")
        return Interval(mean, float("nan"), float("nan"), n)
    mean = float(d.mean())
    half = t_critical(n - 1) * paired_standard_error(d, resamples, seed)
    return Interval(mean, mean - half, mean + half, n)


def paired_ratio_interval(numerators, denominators, resamples: int = 10_000, seed: int = 0) -> Interval:
    """Geometric-mean ratio of paired positive values with its 95% interval: `paired_bootstrap_interval` on the
    log-ratios, exponentiated. A pair of zeros is a ratio of 1; a pair with one zero has no finite ratio (NaN)."""
    top, bottom = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if top.shape != bottom.shape:
        raise ArgumentError(
            f"paired values differ in length: {top.size} and {bottom.size}; pass one value per seed to each side"
        )
    both_zero = (top == 0) & (bottom == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(both_zero, 0.0, np.log(top) - np.log(bottom))
    if not np.isfinite(logs).all():
        return Interval(float("nan"), float("nan"), float("nan"), int(top.size))
    interval = paired_bootstrap_interval(logs, resamples, seed)
    return Interval(
        math.exp(interval.mean) if interval.n else float("nan"),
        math.exp(interval.low),
        math.exp(interval.high),
        interval.n,
    )


def sign_flip_pvalue(differences, max_exact: int = 16, resamples: int = 20_000, seed: int = 0) -> float:
    """Two-sided paired permutation (sign-flip) test of mean difference = 0."""
    d = np.asarray(differences, dtype=np.float64)
    n = d.size
    if n == 0:
        return float("nan")
    observed = abs(d.mean())
    if n <= max_exact:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(resamples, n))
    flipped = np.abs((signs * d).mean(axis=1))
    return float(np.mean(flipped >= observed - 1e-12))


ALPHA = 0.05
"""The sign-flip p-value a paired difference must be below to be called significant."""


def significant(interval: Interval, p_value: float) -> bool:
    """Whether a paired difference is significant: its interval excludes 0 and its sign-flip p-value is below
    `ALPHA` (with fewer than 6 seeds the test cannot get there, whatever the interval says)."""
    return bool(interval.excludes_zero and math.isfinite(p_value) and p_value < ALPHA)


def min_attainable_pvalue(n: int) -> float:
    """Smallest two-sided p-value the exact sign-flip test can give with n pairs."""
    return 2.0 / (2**n) if n else float("nan")
