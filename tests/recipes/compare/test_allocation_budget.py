"""`dataflex compare` with an allocation part: every pilot and commit counts against a completions budget, which stops
the run at the step its real generated completions reach, and its tokens are the ones generated."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.compare.budget import Budget, GenerationLedger  # noqa: E402

BUDGET = 100
PER_STEP = 4 * 4  # prompts per step x generations: TRL's schedule, which an allocation step exceeds


@pytest.fixture(scope="module")
def compare_dir(small_compare):
    return small_compare(
        "compare-allocation", "none,screen", f"completions:{BUDGET}", "--eval-points", "0", "--eval-samples", "0"
    )


def _run(folder, name):
    metrics = [json.loads(line) for line in (folder / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    return metrics, json.loads((folder / "runs" / name / "result.json").read_text())


@pytest.mark.slow
def test_a_screen_run_stops_at_the_step_its_generated_completions_reach_the_budget(compare_dir):
    metrics, result = _run(compare_dir, "screen-seed0")
    generated = [int(m["dataflex/alloc/step_generated"]) for m in metrics]
    assert all(g > PER_STEP for g in generated)  # pilots and commits: more than the schedule's batch
    cumulative = [sum(generated[: k + 1]) for k in range(len(generated))]
    stop = next(k for k, total in enumerate(cumulative, 1) if total >= BUDGET)
    assert [m["step"] for m in metrics] == list(range(1, stop + 1))  # by the schedule it would run 7 steps
    assert result["steps"] == stop and result["completions"] == cumulative[-1]
    assert result["curve"][-1]["completions"] == cumulative[-1]
    assert result["overshoot"] == cumulative[-1] - BUDGET
    assert result["reused_responses"] == 0
    tokens = sum(m["dataflex/alloc/step_generated_tokens"] for m in metrics)
    assert result["completion_tokens"] == round(tokens)
    assert result["signal_groups"] == metrics[-1]["dataflex/alloc/signal_groups"]


@pytest.mark.slow
def test_the_plain_run_is_still_counted_by_the_schedule(compare_dir):
    metrics, result = _run(compare_dir, "none-seed0")
    assert result["completions"] == PER_STEP * len(metrics) and result["steps"] == -(-BUDGET // PER_STEP)


def test_the_ledger_counts_an_allocation_step_from_its_logs():
    ledger = GenerationLedger(Budget.parse("completions:100"))
    ledger.record_step(1, PER_STEP, 1, 1)
    logs = {
        "dataflex/alloc/step_generated": 60.0,
        "dataflex/alloc/step_generated_tokens": 250.0,
        "dataflex/alloc/step_reused_responses": 2.0,
        "completions/mean_length": 9.0,
    }
    assert ledger.record_generated(1, 60) is False
    ledger.record_tokens(1, logs)
    assert ledger.completions == 60 and ledger.completion_tokens == 250.0 and ledger.reused_responses == 2
    assert ledger.may_generate(39) and not ledger.may_generate(40)  # an allocation step's next screen is its last
