"""`dataflex run` with an allocation part counts every pilot and commit it generated, their tokens, its signal groups,
and the responses it reused apart."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402
from dataflex_callbacks.recipes.completion_accounting import (  # noqa: E402
    generated_tokens,
    logged_generated,
    signal_accounting,
)

STEPS, PROMPTS, GENERATIONS = 3, 4, 4
SHORT = ["--steps", str(STEPS), "--no-progress", "--prompts-per-step", str(PROMPTS)]


@pytest.fixture(scope="module")
def screen_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("alloc") / "screen"
    argv = ["run", *SHORT, "--num-generations", str(GENERATIONS), "--strategy", "screen", "--output-dir", str(folder)]
    assert main(argv) == 0
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return metrics, json.loads((folder / "config.json").read_text())


@pytest.mark.slow
def test_a_screen_run_counts_every_pilot_and_commit(screen_run):
    metrics, config = screen_run
    generated = [int(m["dataflex/alloc/step_generated"]) for m in metrics]
    assert len(metrics) == STEPS
    assert [m["generated"] for m in metrics] == generated
    assert [m["completions"] for m in metrics] == [sum(generated[: k + 1]) for k in range(STEPS)]
    assert config["completions_generated"] == sum(generated) == metrics[-1]["dataflex/alloc/generated"]
    # TRL's schedule (prompts x generations per step) is what an allocation run must not be counted by.
    assert config["completions_generated"] != STEPS * PROMPTS * GENERATIONS


@pytest.mark.slow
def test_a_screen_run_counts_its_tokens_signal_groups_and_reused_responses_apart(screen_run):
    metrics, config = screen_run
    assert [m["generated_tokens"] for m in metrics] == [m["dataflex/alloc/step_generated_tokens"] for m in metrics]
    assert all(m["generated_tokens"] > 0 for m in metrics)
    assert [m["signal_groups"] for m in metrics] == [m["dataflex/alloc/step_signal_groups"] for m in metrics]
    assert config["signal_groups_trained"] == metrics[-1]["dataflex/alloc/signal_groups"]
    zero = [m["generated"] - GENERATIONS * m["signal_groups"] for m in metrics]
    assert [m["zero_signal_completions"] for m in metrics] == zero
    assert [m["reused_responses"] for m in metrics] == [0] * STEPS  # screen reuses nothing: none generated twice


def test_the_step_logs_of_an_allocation_part_are_read():
    logs = {
        "dataflex/alloc/step_generated": 44.0,
        "dataflex/alloc/step_generated_tokens": 197.0,
        "dataflex/alloc/step_signal_groups": 3.0,
        "completions/mean_length": 4.5,
        "frac_reward_zero_std": 0.75,
    }
    assert logged_generated(logs) == 44
    assert generated_tokens(logs, 44) == 197.0  # exact: not the mean of the pilot and commit calls' means x 44
    assert signal_accounting(logs, 44, 8, None, 0) == (3, 44 - 3 * 8)
    assert logged_generated({"dataflex/dynamic/generated": 48.0}) == 48
    assert logged_generated({"completions/mean_length": 4.5}) is None
    assert generated_tokens({"completions/mean_length": 4.5}, 16) == 72.0
