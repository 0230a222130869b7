"""compare.noise: the binomial evaluation noise of the headline (prompts x samples per prompt) and the warning when a
headline difference is within twice it, in report.md and on the console."""

import math

import pytest

from dataflex_callbacks.recipes.compare.grid import GridOutcome
from dataflex_callbacks.recipes.compare.noise import difference_noise, evaluation_noise_warning, headline_samples

from .test_reach import record, settings_for


def pair(after: dict[str, list[float]], rows: int = 100, k: int = 4) -> list[dict]:
    """Records of `base` and `fast` (seeds 0 and 1) whose headlines end at `after[strategy][seed]`, scored on `rows`
    held-out prompts with `k` samples each."""
    records = []
    for strategy, finals in after.items():
        for seed, final in enumerate(finals):
            r = record(strategy, seed, [(0, 0.3), (200, final), (400, final)])
            r["headline"].update(rows=rows, k=k)
            records.append(r)
    return records


def test_the_noise_of_a_mean_paired_difference_counts_prompts_times_samples_of_both_runs_of_every_seed():
    records = pair({"base": [0.5, 0.5], "fast": [0.5, 0.5]})
    assert headline_samples(records[0]["headline"]) == 400
    # Each run: sqrt(0.25 / 400) = 0.025; a seed's difference sqrt(2) x 0.025; the mean of 2 seeds' over sqrt(2).
    assert difference_noise(records, "fast", "base") == pytest.approx(0.025)
    greedy = pair({"base": [0.5, 0.5], "fast": [0.5, 0.5]}, k=0)  # a greedy headline: one completion per prompt
    assert headline_samples(greedy[0]["headline"]) == 100
    assert difference_noise(greedy, "fast", "base") == pytest.approx(0.05)
    assert math.isnan(difference_noise(records, "fast", "missing"))


def test_a_headline_difference_within_twice_the_evaluation_noise_is_warned_about(tmp_path):
    from dataflex_callbacks.recipes.compare.cli import summary_lines
    from dataflex_callbacks.recipes.compare.report import render_report

    close = pair({"base": [0.5, 0.5], "fast": [0.53, 0.54]})  # +0.035, within 2 x 0.025
    warning = evaluation_noise_warning(close, "base", {"fast": 0.035})
    assert warning is not None and "`fast` +0.035 (2 SE: ±0.050)" in warning and "100 prompts x 4 samples" in warning
    outcome = GridOutcome(records=close, reused=[r["name"] for r in close])
    report = render_report(settings_for(tmp_path), outcome)
    assert "is within twice the evaluation noise" in report and "| ±0.050 (within noise) |" in report
    assert any("within twice the evaluation noise" in line for line in summary_lines(settings_for(tmp_path), outcome))
    far = pair({"base": [0.5, 0.5], "fast": [0.62, 0.63]})  # +0.125: beyond the noise
    assert evaluation_noise_warning(far, "base", {"fast": 0.125}) is None
    far_report = render_report(settings_for(tmp_path), GridOutcome(records=far, reused=[]))
    assert "is within twice the evaluation noise" not in far_report and "(within noise) |" not in far_report
    noise = 2 * difference_noise(far, "fast", "base")
    assert f"| ±{noise:.3f} |" in far_report
