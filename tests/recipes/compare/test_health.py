"""The comparison's health checks: truncated completions and a held-out set too small to resolve the differences."""

import math
from types import SimpleNamespace

import pytest

from dataflex_callbacks.recipes.compare.health import (
    held_out_noise,
    held_out_size_warning,
    rows_to_resolve,
    truncated_share,
    truncation_warning,
)


def _settings(dataset="mine.jsonl", eval_dataset=None, max_completion_length=64, suite="testbed"):
    return SimpleNamespace(
        base=SimpleNamespace(
            dataset=dataset, eval_dataset=eval_dataset, suite=suite, max_completion_length=max_completion_length
        )
    )


def _record(name, after=0.5, rows=8, truncated=None):
    """A result whose headline after training is `after` on `rows` held-out prompts (greedy accuracy is 0.9: the
    size check reads the headline)."""
    return {
        "name": name,
        "after": {"overall": 0.9},
        "held_out_rows": {"total": 2 * rows, "per_domain": {}},
        "headline": {"metric": "sampled_pass_at_1", "levels": ["a"], "rows": rows, "before": 0.5, "after": after},
        "truncated_share": truncated,
    }


def test_truncated_share_is_the_mean_of_trl_s_clipped_ratio_over_logged_steps():
    metrics = [
        {"completions/clipped_ratio": 1.0},
        {"loss": 0.1},
        {"completions/clipped_ratio": 0.5},
        {"completions/clipped_ratio": float("nan")},
    ]
    assert truncated_share(metrics) == pytest.approx(0.75)
    assert truncated_share([{"loss": 0.0}]) is None


def test_runs_mostly_cut_short_are_named_with_the_limit_and_the_fix():
    records = [_record("baseline-seed0", truncated=0.9), _record("dapo-seed0", truncated=0.2)]
    warning = truncation_warning(records, _settings())
    assert warning.startswith(
        "1 of 2 runs had more than 50% of their training completions cut at "
        "--max-completion-length 64 tokens (up to 90%: baseline-seed0)"
    )
    assert "raise --max-completion-length" in warning
    assert truncation_warning([_record("a", truncated=0.5)], _settings()) is None  # at the limit: not flagged
    # The toy suite sizes completions to its answers: cut completions are its design, not a fault.
    assert truncation_warning(records, _settings(dataset=None, suite="toy")) is None
    assert truncation_warning(records, _settings(dataset=None)) is not None  # the testbed's answers end with EOS


def test_a_held_out_set_too_small_for_the_measured_differences_is_flagged_with_the_size_that_would_resolve_them():
    records = [_record("baseline-seed0", after=0.5, rows=8), _record("x-seed0", after=0.5, rows=8)]
    warning = held_out_size_warning(records, _settings(), {"x": 0.1})
    noise = held_out_noise(0.5, 8)
    assert noise == pytest.approx(2 * math.sqrt(2 * 0.25 / 8))
    assert f"headline's held-out prompts ({8}, mean headline 0.50)" in warning and f"±{noise:.3f}" in warning
    assert f"about {rows_to_resolve(0.5, 0.1)} held-out prompts would resolve a difference of 0.100" in warning
    assert rows_to_resolve(0.5, 0.1) == 200
    assert "raise --n-test" in warning
    # The same difference on 800 prompts is resolved: no warning.
    big = [dict(r, headline={**r["headline"], "rows": 800}) for r in records]
    assert held_out_size_warning(big, _settings(), {"x": 0.1}) is None


def test_with_no_measured_difference_the_advice_aims_at_the_resolution_floor():
    records = [_record("a", after=0.5, rows=50), _record("b", after=0.5, rows=50)]
    warning = held_out_size_warning(records, _settings(eval_dataset="held.jsonl"), {"b": 0.0})
    assert "resolve a difference of 0.020" in warning and "pass a larger --eval-dataset" in warning
    # An accuracy of 0 or 1 everywhere has no binomial noise: that case is the all-equal warning's.
    assert held_out_size_warning([_record("a", after=1.0), _record("b", after=1.0)], _settings(), {"b": 0.0}) is None
