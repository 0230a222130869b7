"""``knapsack`` with the real Lightning Trainer (`examples/lightning_allocation.py`): the module's loop generates the
per-prompt counts `rounds.start` returns, one round per step, within the budget of ``budget x P x G``."""

from lightning_examples import load_example
from lightning_toy import toy_trainer

from dataflex_callbacks.integrations.lightning import DataFlexCallback
from dataflex_callbacks.recipes.tasks import load_task_suite

PROMPTS, STEPS, BUDGET = 4, 4, 0.5


def test_knapsack_spreads_its_budget_over_the_modules_prompts_in_one_round_per_step():
    example = load_example("lightning_allocation")
    train = load_task_suite(seed=0, n_train=16, n_test=1)["train"]
    module = example.AllocatedGRPOModule(train, prompts_per_step=PROMPTS)
    asked = []
    generate = module.generate

    def recording(rows, counts, round_index):
        asked.append((round_index, counts.clone()))
        return generate(rows, counts, round_index)

    module.generate = recording
    callback = DataFlexCallback({"allocation": {"name": "knapsack", "params": {"budget": BUDGET}}})
    toy_trainer([callback], max_steps=STEPS).fit(module)
    assert [round_index for round_index, _ in asked] == [0] * STEPS  # one round per step
    budget = BUDGET * PROMPTS * module.group_size
    assert all(0 < int(counts.sum()) <= budget and bool((counts % 2 == 0).all()) for _, counts in asked)
    totals = callback.strategy.allocation_metrics()
    assert totals["alloc/generated"] == module.generated_rows == sum(int(c.sum()) for _, c in asked)
    assert totals["alloc/commit_completions"] == 0
