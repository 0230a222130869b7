"""`examples/lightning_allocation.py` with the real Lightning Trainer: the strategy says how many completions each
prompt gets next, and every completion is counted. The module sets only ``self.group_size``: the callback binds it
and logs ``dataflex/alloc/*``; the tests read the strategy through its doors (``allocation_metrics``, ...)."""

import pytest
from lightning_examples import load_example
from lightning_toy import toy_trainer

from dataflex_callbacks import DataFlexError
from dataflex_callbacks.integrations.lightning import DataFlexCallback
from dataflex_callbacks.recipes.tasks import load_task_suite


def fit(strategy, steps=3, n_train=16):
    example = load_example("lightning_allocation")
    train = load_task_suite(seed=0, n_train=n_train, n_test=1)["train"]
    module = example.AllocatedGRPOModule(train, prompts_per_step=4)
    asked = []
    generate = module.generate

    def recording(rows, counts, round_index):
        asked.append(counts.clone())
        return generate(rows, counts, round_index)

    module.generate = recording
    callback = DataFlexCallback(strategy)
    trainer = toy_trainer([callback], max_steps=steps)
    trainer.fit(module)
    return module, callback, trainer, asked


def test_screening_tells_the_module_the_counts_and_counts_every_completion():
    module, callback, trainer, asked = fit("screen")
    assert callback.strategy.allocation_group_size == module.group_size
    assert callback.strategy.allocation_response_bank is None  # screen reuses nothing: the module stores nothing
    assert all(set(counts.tolist()) <= {0, 2} for counts in asked[::2])  # pilots: 2 each
    metrics = trainer.callback_metrics
    assert metrics["dataflex/alloc/generated"].item() == module.generated_rows == sum(int(c.sum()) for c in asked)
    totals = callback.strategy.allocation_metrics()
    assert totals["alloc/pilot_completions"] == 2 * 4 * 3
    # A committed group holds its pilot and its commit: G rows; a unanimous pilot got no commit.
    assert totals["alloc/commit_completions"] == 2 * totals["alloc/trained_groups"]
    assert totals["alloc/signal_groups"] == totals["alloc/trained_groups"]


def test_adaptive_stages_until_a_correct_answer_up_to_the_cap():
    strategy = {"allocation": {"name": "adaptive", "params": {"stage": 2, "cap": 4}}}
    module, callback, trainer, asked = fit(strategy, steps=4)
    totals = callback.strategy.allocation_metrics()
    assert totals["alloc/generated"] == module.generated_rows
    assert all(int(c.max()) <= 2 for c in asked) and totals["alloc/commit_completions"] > 0


def test_reuse_gives_an_all_wrong_group_an_earlier_correct_response_counted_apart():
    # One prompt per domain, the same four every step: the fair-coin prompt is solved one step, all wrong another.
    strategy = {"allocation": {"name": "adaptive", "params": {"stage": 2, "cap": 2, "reuse": True}}}
    module, callback, trainer, asked = fit(strategy, steps=8, n_train=1)
    totals = callback.strategy.allocation_metrics()
    reused = totals["alloc/reused_responses"]
    assert reused > 0, "no group reused a response: the test is void"
    assert reused == trainer.callback_metrics["dataflex/alloc/reused_responses"].item()
    assert totals["alloc/generated"] == module.generated_rows
    assert trainer.callback_metrics["dataflex/alloc/reused_share"].item() == pytest.approx(
        reused / (module.generated_rows + reused)
    )


def test_a_strategy_without_an_allocation_part_is_named():
    example = load_example("lightning_allocation")
    module = example.AllocatedGRPOModule(load_task_suite(seed=0, n_train=8, n_test=1)["train"], prompts_per_step=4)
    trainer = toy_trainer([DataFlexCallback("diffband")], max_steps=1)
    with pytest.raises(DataFlexError, match="no allocation part"):
        trainer.fit(module)


def test_the_callback_binds_the_modules_group_size_and_logs_the_counts():
    example = load_example("lightning_allocation")
    module = example.AllocatedGRPOModule(load_task_suite(seed=0, n_train=8, n_test=1)["train"], group_size=6)
    callback = DataFlexCallback("screen")
    trainer = toy_trainer([callback], max_steps=2)
    trainer.fit(module)
    assert callback.strategy.allocation_group_size == 6
    assert trainer.callback_metrics["dataflex/alloc/pilot_completions"].item() > 0


def test_screening_without_a_group_size_is_refused_naming_the_attribute():
    example = load_example("lightning_allocation")

    class Bare(example.AllocatedGRPOModule):
        def __getattribute__(self, name):
            if name == "group_size":
                raise AttributeError(name)
            return super().__getattribute__(name)

    module = Bare(load_task_suite(seed=0, n_train=8, n_test=1)["train"], prompts_per_step=4)
    trainer = toy_trainer([DataFlexCallback("screen")], max_steps=1)
    with pytest.raises(DataFlexError, match=r"has no 'group_size': set self.group_size = G") as error:
        trainer.fit(module)
    assert "\n" not in str(error.value)
