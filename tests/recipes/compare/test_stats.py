"""The comparison statistics on synthetic seeds with a known effect and with none."""

import numpy as np
import pytest

from dataflex_callbacks.recipes.compare import stats

REPETITIONS = 2000


def _intervals(make_differences, repetitions=REPETITIONS, resamples=2000):
    rng = np.random.default_rng(1234)
    return [
        stats.paired_bootstrap_interval(make_differences(rng), resamples=resamples, seed=i) for i in range(repetitions)
    ]


@pytest.mark.parametrize("n", [3, 5, 10])
def test_mean_interval_covers_the_true_mean_95_percent_of_the_time(n):
    rng = np.random.default_rng(n)
    covered = 0
    for _ in range(REPETITIONS):
        interval = stats.mean_interval(rng.normal(0.45, 0.04, size=n))
        covered += interval.low <= 0.45 <= interval.high
    assert abs(covered / REPETITIONS - 0.95) < 0.02


@pytest.mark.parametrize("n", [3, 5, 8])
def test_paired_interval_covers_a_known_effect_about_95_percent(n):
    effect = 0.02
    intervals = _intervals(lambda rng: rng.normal(effect, 0.03, size=n))
    coverage = np.mean([iv.low <= effect <= iv.high for iv in intervals])
    assert 0.92 <= coverage <= 0.98, coverage


@pytest.mark.parametrize("n", [3, 5, 8])
def test_paired_interval_false_positive_rate_is_about_5_percent_without_effect(n):
    intervals = _intervals(lambda rng: rng.normal(0.0, 0.03, size=n))
    false_positive = np.mean([iv.excludes_zero for iv in intervals])
    assert 0.02 <= false_positive <= 0.08, false_positive


def test_paired_interval_detects_a_large_effect():
    intervals = _intervals(lambda rng: rng.normal(0.05, 0.03, size=8), repetitions=300)
    assert np.mean([iv.excludes_zero and iv.low > 0 for iv in intervals]) > 0.9


def test_sign_flip_test_holds_its_level_without_effect():
    rng = np.random.default_rng(7)
    pvalues = np.array([stats.sign_flip_pvalue(rng.normal(0.0, 1.0, size=8)) for _ in range(REPETITIONS)])
    # An exact permutation test: P(p <= alpha) <= alpha under a symmetric null.
    assert np.mean(pvalues <= 0.05) <= 0.05 + 0.015
    assert np.mean(pvalues <= 0.25) == pytest.approx(0.25, abs=0.03)


def test_sign_flip_test_rejects_a_clear_effect_and_respects_its_floor():
    rng = np.random.default_rng(8)
    pvalues = [stats.sign_flip_pvalue(rng.normal(1.5, 1.0, size=8)) for _ in range(300)]
    assert np.mean(np.array(pvalues) <= 0.05) > 0.85
    # Three seeds all in the same direction: the smallest p-value three seeds can give.
    assert stats.sign_flip_pvalue([0.1, 0.2, 0.3]) == pytest.approx(stats.min_attainable_pvalue(3)) == 0.25


def test_paired_interval_agrees_with_the_analytic_t_interval():
    d = np.array([0.01, 0.04, -0.02, 0.03, 0.05])
    interval = stats.paired_bootstrap_interval(d, resamples=200_000)
    analytic = stats.mean_interval(d)
    assert interval.low == pytest.approx(analytic.low, abs=2e-3)
    assert interval.high == pytest.approx(analytic.high, abs=2e-3)


def test_degenerate_inputs_give_no_interval_rather_than_a_wrong_one():
    assert stats.paired_bootstrap_interval([0.1]).n == 1
    assert not stats.paired_bootstrap_interval([0.1]).excludes_zero
    assert np.isnan(stats.mean_interval([]).mean)


def test_accuracy_intervals_stay_inside_the_values_an_accuracy_can_take():
    # digit in docs/main_job.md before clipping: 0.77 [0.01, 1.53] over 3 seeds.
    raw = stats.mean_interval([0.4, 0.93, 0.98])
    assert raw.high > 1.0  # the Student-t interval of 3 seeds runs past 1
    clipped = stats.accuracy_interval([0.4, 0.93, 0.98])
    assert raw.low < 0.0 and (clipped.mean, clipped.low, clipped.high) == (raw.mean, 0.0, 1.0)
    low = stats.accuracy_interval([0.0, 0.02, 0.5])
    assert low.low == 0.0 and low.high == stats.mean_interval([0.0, 0.02, 0.5]).high
    assert stats.Interval(0.5, -1.4, 2.0, 3).clipped(-1.0, 1.0).excludes_zero is False


def _paired_records(differences, base=0.5):
    """Records whose headline after training differs from the baseline's by `differences`, seed by seed."""
    records = []
    for seed, difference in enumerate(differences):
        records.append({"strategy": "base", "seed": seed, "headline": {"after": base}})
        records.append({"strategy": "other", "seed": seed, "headline": {"after": base + difference}})
    return records


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_paired_standard_error_is_the_t_intervals_and_the_intervals_half_width_over_t(n):
    d = np.random.default_rng(n).normal(0.01, 0.02, size=n)
    standard_error = stats.paired_standard_error(d, resamples=200_000)
    # The bootstrap's plug-in SE, sd(ddof=0)/sqrt(n), corrected by sqrt(n/(n-1)): the analytic sd(ddof=1)/sqrt(n).
    assert standard_error == pytest.approx(d.std(ddof=1) / np.sqrt(n), rel=0.01)
    interval = stats.paired_bootstrap_interval(d)
    half = (interval.high - interval.low) / 2
    assert half == pytest.approx(stats.t_critical(n - 1) * stats.paired_standard_error(d), rel=1e-12)
    assert np.isnan(stats.paired_standard_error(d[:1]))


def test_two_seeds_with_identical_differences_are_not_significant_beside_p_one_half():
    from dataflex_callbacks.recipes.compare.report import paired_difference

    paired = paired_difference(_paired_records([0.1, 0.1]), "other", "base")
    # The bootstrap interval has zero width there and excludes 0, but 2 seeds cannot give a sign-flip p below 0.5.
    assert paired["interval"].excludes_zero and paired["p_value"] == pytest.approx(0.5)
    assert paired["significant"] is False
    # Both the interval and the sign-flip test must agree: 6 seeds, every one better, is significant.
    paired = paired_difference(_paired_records([0.1, 0.12, 0.09, 0.11, 0.1, 0.13]), "other", "base")
    assert paired["p_value"] < 0.05 and paired["significant"] is True
