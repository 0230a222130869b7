"""`dataflex compare` under a completions budget: evaluations planned by completions for every strategy, and a
run that stops within one generation round of the budget, its overshoot in the report.

Real tiny runs: `baseline` generates one round (4 prompts x 4 completions = 16) per step, `dapo` one to four
rounds per step, so planning by steps gave them different numbers of points at different completions.
"""

import csv
import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.compare.budget import Budget, EvalPlan, GenerationLedger, budget_callback  # noqa: E402

BUDGET = 260  # not a multiple of a round, so a run overshoots; spacing 65 > the 64 a dapo step can generate
POINTS = 3
ROUND = 4 * 4
STRATEGIES = ("baseline", "dapo")


@pytest.fixture(scope="module")
def compare_dir(small_compare):
    return small_compare(
        "compare-eval-plan",
        ",".join(STRATEGIES),
        f"completions:{BUDGET}",
        *("--eval-points", str(POINTS), "--n-test", "6", "--n-train", "40"),
    )


def _result(folder, strategy):
    return json.loads((folder / "runs" / f"{strategy}-seed0" / "result.json").read_text())


def test_the_plan_is_in_completions_for_a_completions_budget_and_in_steps_otherwise():
    assert EvalPlan(Budget("completions", BUDGET), POINTS).thresholds() == [65, 130, 195]
    assert EvalPlan(Budget("steps", 10), 4).thresholds() == [2, 4, 6, 8]
    plan = EvalPlan(Budget("completions", 100), 3)
    assert plan.due(0, steps=1, completions=60) == [25, 50]  # one step crossed two thresholds
    assert plan.due(2, steps=2, completions=70) == []
    assert plan.due(2, steps=3, completions=80) == [75]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_is_evaluated_at_the_planned_completions(compare_dir, strategy):
    result = _result(compare_dir, strategy)
    metrics = [
        json.loads(line)
        for line in (compare_dir / "runs" / f"{strategy}-seed0" / "metrics.jsonl").read_text().splitlines()
    ]
    middle = result["curve"][1:-1]
    assert len(middle) == POINTS, [(p["step"], p["completions"]) for p in result["curve"]]
    cumulative = {m["step"]: m["completions"] for m in metrics}
    for point, threshold in zip(middle, (65, 130, 195), strict=True):
        assert point["planned"] == [threshold]
        # The first step at or past the threshold: the step before it had not reached it.
        assert point["completions"] == cumulative[point["step"]] >= threshold
        assert cumulative.get(point["step"] - 1, 0) < threshold
    assert result["eval_points"] == {"planned": POINTS, "evaluated": POINTS}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_run_stops_within_one_round_of_the_budget_and_the_report_says_by_how_much(compare_dir, strategy):
    result = _result(compare_dir, strategy)
    assert result["round_completions"] == ROUND
    assert result["completions"] >= BUDGET
    assert result["overshoot"] == result["completions"] - BUDGET
    assert 0 <= result["overshoot"] < ROUND
    with open(compare_dir / "results.csv", newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["strategy"] == strategy)
    assert int(row["overshoot"]) == result["overshoot"] and int(row["eval_points"]) == POINTS
    report = (compare_dir / "report.md").read_text()
    assert f"overshoot beyond the budget of {BUDGET} completions" in report
    assert f"  - `{strategy}`: mean {result['overshoot']}, max {result['overshoot']}" in report


def test_the_budget_ends_a_dynamic_sampling_step_after_the_round_that_reaches_it(tmp_path):
    """A reward that is always 0: no group carries signal, so without the budget every step runs max_rounds."""
    from datasets import Dataset
    from trl import GRPOConfig

    from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
    from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer

    def zero_reward(completions, **kwargs):
        return [0.0] * len(completions)

    tokenizer = build_tiny_tokenizer()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=2,
        max_completion_length=4,
        max_steps=5,
        learning_rate=1e-3,
        seed=0,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    ledger = GenerationLedger(Budget("completions", 44))  # rounds of 8: 32 in step 1, then 40 < 44 <= 48
    callback = budget_callback(ledger)
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=[zero_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(16)]}),
        processing_class=tokenizer,
        callbacks=[callback],
        strategy={"dynamic_sampling": {"max_rounds": 4, "carry_over": False}},
        record_decisions=True,
    )
    callback.bind_trainer(trainer)
    trainer.train()
    generated = [d["dynamic"]["dynamic/generated"] for d in trainer.dataflex.decisions]
    assert generated == [32, 16]
    assert trainer.state.global_step == 2 and ledger.completions == 48 and ledger.overshoot == 4
