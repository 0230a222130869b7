"""`dataflex run` counts every completion dynamic sampling generates, and the signal groups of every step."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402
from dataflex_callbacks.recipes.completion_accounting import signal_accounting  # noqa: E402

SHORT = ["--steps", "3", "--no-progress", "--prompts-per-step", "4", "--num-generations", "4", "--n-test", "20"]
PER_STEP = 16


def _finished(folder, strategy):
    assert main(["run", *SHORT, "--strategy", strategy, "--output-dir", str(folder)]) == 0
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return metrics, json.loads((folder / "config.json").read_text())


@pytest.mark.slow
def test_dapo_run_counts_every_round_and_its_signal_groups(tmp_path):
    metrics, config = _finished(tmp_path / "dapo", "dapo")
    generated = [m["dataflex/dynamic/generated"] for m in metrics]
    assert any(g > PER_STEP for g in generated)  # the run did generate further rounds
    assert [m["generated"] for m in metrics] == generated
    assert [m["completions"] for m in metrics] == [sum(generated[: k + 1]) for k in range(len(generated))]
    assert config["completions_generated"] == sum(generated)
    assert [m["signal_groups"] for m in metrics] == [m["dataflex/dynamic/signal_groups"] for m in metrics]
    assert config["signal_groups_trained"] == sum(m["dataflex/dynamic/signal_groups"] for m in metrics)
    # TRL's frac_reward_zero_std is the mean over the step's rounds, which all hold B groups.
    zero = [round(m["frac_reward_zero_std"] * g) for m, g in zip(metrics, generated, strict=True)]
    assert [m["zero_signal_completions"] for m in metrics] == zero
    assert config["zero_signal_completions"] == sum(zero)


@pytest.mark.slow
def test_baseline_run_counts_one_batch_per_step_and_its_unequal_reward_groups(tmp_path):
    metrics, config = _finished(tmp_path / "baseline", "baseline")
    assert [m["generated"] for m in metrics] == [PER_STEP] * 3
    assert config["completions_generated"] == 3 * PER_STEP
    zero_groups = [round(m["frac_reward_zero_std"] * 4) for m in metrics]
    assert [m["signal_groups"] for m in metrics] == [4 - z for z in zero_groups]
    assert [m["zero_signal_completions"] for m in metrics] == [4 * z for z in zero_groups]
    assert config["signal_groups_trained"] == sum(4 - z for z in zero_groups)


def test_signal_accounting_reads_the_step_logs():
    # No dynamic sampling: a quarter of the 4 groups of 16 completions had equal rewards.
    assert signal_accounting({"frac_reward_zero_std": 0.25}, 16, 4, None, 0) == (3, 4)
    assert signal_accounting({}, 0, 4, None, 0) == (0, 0)  # no generation this step
    assert signal_accounting({}, 16, 4, None, 0) == (None, None)  # the logs cannot tell
    # Dynamic sampling: the trained signal groups it logged, the buffer's growth of zero-signal completions.
    logs = {"dataflex/dynamic/signal_groups": 4.0, "frac_reward_zero_std": 0.5}
    assert signal_accounting(logs, 48, 4, 70, 38) == (4, 32)
    assert signal_accounting(logs, 48, 4, None, 0) == (4, None)
