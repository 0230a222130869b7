"""`examples/lightning_grpo.py` trains a few real GRPO steps with the tiny model and the task suite."""

import importlib.util
import math
import os

import pytest

from dataflex_callbacks.integrations.lightning import DataFlexCallback
from dataflex_callbacks.recipes.tasks import load_task_suite
from lightning_toy import toy_trainer

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "lightning_grpo.py")


def load_example():
    spec = importlib.util.spec_from_file_location("lightning_grpo", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_example_module_trains_with_the_callback():
    example = load_example()
    module = example.GRPOModule(load_task_suite(seed=0, n_train=8, n_test=1)["train"], prompts_per_step=4)
    trainer = toy_trainer([DataFlexCallback(example.STRATEGY)], max_steps=3)
    trainer.fit(module)
    metrics = trainer.callback_metrics
    assert math.isfinite(float(metrics["train/loss"]))
    assert {"dataflex/kept_frac", "dataflex/mix/target/echo"} <= set(metrics)


def test_example_skips_prompts_with_its_data_module():
    example = load_example()
    train = load_task_suite(seed=0, n_train=16, n_test=1)["train"]
    module = example.GRPOModule(train, prompts_per_step=4)
    callback = DataFlexCallback("skip")
    trainer = toy_trainer([callback], max_steps=6)
    trainer.fit(module, datamodule=example.TaskData(train, prompts_per_step=4))
    history = callback.strategy.pre_select.history
    assert history.size > 0 and set(history.keys) <= set(train["prompt_key"]), "keys follow the sampler's rule"
    assert trainer.callback_metrics["dataflex/pre_select/completions_saved"].item() == \
        module.group_size * callback.strategy.pre_select.skipped
