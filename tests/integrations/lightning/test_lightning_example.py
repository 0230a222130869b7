"""`examples/lightning_grpo.py` trains a few real GRPO steps with the tiny model and the task suite."""

import math

import pytest
import torch
from lightning_examples import load_example
from lightning_toy import toy_trainer

from dataflex_callbacks.integrations.lightning import DataFlexCallback
from dataflex_callbacks.recipes.tasks import load_task_suite

pytestmark = pytest.mark.slow


def test_example_module_trains_with_the_callback():
    example = load_example("lightning_grpo")
    module = example.GRPOModule(load_task_suite(seed=0, n_train=8, n_test=1)["train"], prompts_per_step=4)
    trainer = toy_trainer([DataFlexCallback(example.STRATEGY)], max_steps=3)
    trainer.fit(module)
    metrics = trainer.callback_metrics
    assert math.isfinite(float(metrics["train/loss"]))
    assert {"dataflex/kept_frac", "dataflex/mix/target/echo"} <= set(metrics)


def test_example_skips_prompts_with_its_data_module():
    example = load_example("lightning_grpo")
    train = load_task_suite(seed=0, n_train=16, n_test=1)["train"]
    module = example.GRPOModule(train, prompts_per_step=4)
    callback = DataFlexCallback("skip")
    trainer = toy_trainer([callback], max_steps=6)
    trainer.fit(module, datamodule=example.TaskData(train, prompts_per_step=4))
    history = callback.strategy.pre_select.history
    assert history.size > 0 and set(history.keys) <= set(train["prompt_key"]), "keys follow the sampler's rule"
    assert (
        trainer.callback_metrics["dataflex/pre_select/completions_redirected"].item()
        == module.group_size * callback.strategy.pre_select.skipped
    )


def test_example_dynamic_sampling_trains_exactly_b_signal_groups():
    from dataflex_callbacks.config import load_config

    example = load_example("lightning_grpo")
    train = load_task_suite(seed=0, n_train=16, n_test=1)["train"]
    module = example.GRPOModule(train, prompts_per_step=4, dynamic_sampling=True)
    taken_per_step = []
    take = None

    def recording_take(*args, **kwargs):
        taken = take(*args, **kwargs)
        taken_per_step.append((taken.num_groups, taken.short, taken.rewards.view(-1, module.group_size)))
        return taken

    buffer = module.signal_buffer  # wrap the buffer's take once it exists, to see every step's groups

    def signal_buffer():
        nonlocal take
        built = buffer()
        if take is None:
            take, built.take = built.take, recording_take
        return built

    module.signal_buffer = signal_buffer
    strategy = {**load_config(example.STRATEGY), "dynamic_sampling": {"max_rounds": 3}}
    callback = DataFlexCallback(strategy)
    trainer = toy_trainer([callback], max_steps=4)
    trainer.fit(module)
    assert len(taken_per_step) >= 4 and module.signal_groups.max_rounds == 3
    for groups, short, rewards in taken_per_step:
        if not short:
            assert groups == 4, "a step that is not short trains exactly B groups"
        solve_rate = (rewards > 0.5).float().mean(dim=1)
        assert bool(((solve_rate > 0) & (solve_rate < 1)).all()), "every trained group survives the select part"
    metrics = trainer.callback_metrics
    assert {
        "dataflex/dynamic/rounds",
        "dataflex/dynamic/generated",
        "dataflex/dynamic/signal_groups",
        "dataflex/dynamic/carried",
        "dataflex/dynamic/short",
    } <= set(metrics)
    assert module.signal_groups.totals["generated"] > 4 * 4 * module.group_size, "some step generated more rounds"
    assert math.isfinite(float(metrics["train/loss"]))


def test_example_without_the_flag_builds_no_buffer():
    example = load_example("lightning_grpo")
    module = example.GRPOModule(load_task_suite(seed=0, n_train=8, n_test=1)["train"], prompts_per_step=4)
    trainer = toy_trainer([DataFlexCallback("difffilter")], max_steps=2)
    trainer.fit(module)
    assert module.signal_groups is None and "dataflex/dynamic/rounds" not in trainer.callback_metrics


def dynamic_skip_run(tmp_path, max_steps, save_every=None, ckpt_path=None):
    """The example with ``--strategy skip --dynamic-sampling`` (max_rounds 3): every round's prompt keys, per step."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from dataflex_callbacks.config import load_config

    example = load_example("lightning_grpo")
    train = load_task_suite(seed=0, n_train=8, n_test=1)["train"]
    module = example.GRPOModule(train, prompts_per_step=4, dynamic_sampling=True)
    rounds = []
    rollout = module.rollout

    def recording_rollout(rows):
        out = rollout(rows)
        rounds.append(
            (
                module.global_step,
                getattr(module, "round", 0),
                [row["prompt_key"] for row in rows],
                out["rewards"].tolist(),
            )
        )
        return out

    module.rollout = recording_rollout
    callback = DataFlexCallback({**load_config("skip"), "dynamic_sampling": {"max_rounds": 3}})
    callbacks = [callback]
    if save_every is not None:
        callbacks.append(
            ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=save_every, save_top_k=-1)
        )
    trainer = toy_trainer(
        callbacks, max_steps=max_steps, tmp_path=tmp_path, enable_checkpointing=save_every is not None
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return module, callback, rounds


def test_example_dynamic_sampling_shows_the_filter_every_generated_group(tmp_path):
    # Issue 24: the example gave the filter only the trained (signal) groups, so `skip` never skipped.
    module, callback, rounds = dynamic_skip_run(tmp_path, max_steps=12)
    pre_select, totals = callback.strategy.pre_select, module.signal_groups.totals
    observed_groups = int(pre_select.history.seen[: pre_select.history.size].sum())
    assert observed_groups == totals["generated"] // module.group_size == len(rounds) * 4
    assert observed_groups > totals["trained_groups"], "zero-signal groups were generated and observed too"
    assert pre_select.skipped > 0, "the filter skips prompts in Lightning's sampler and in the further rounds'"


def test_example_dynamic_sampling_resumes_as_the_uninterrupted_run(tmp_path):
    full, full_callback, full_rounds = dynamic_skip_run(tmp_path / "full", max_steps=8)
    dynamic_skip_run(tmp_path / "first", max_steps=4, save_every=4)
    resumed, resumed_callback, resumed_rounds = dynamic_skip_run(
        tmp_path / "second", max_steps=8, ckpt_path=str(tmp_path / "first" / "step=4.ckpt")
    )
    later = [entry for entry in full_rounds if entry[0] >= 4]
    assert len(later) > 4, "some step after the checkpoint generated further rounds"
    assert resumed_rounds == later, "every round's prompts (Lightning's batch and the further rounds) and rewards"
    assert resumed.round_sampler.state_dict() == full.round_sampler.state_dict()
    assert resumed.signal_groups.totals == full.signal_groups.totals
    want, got = full_callback.strategy.pre_select.state_dict(), resumed_callback.strategy.pre_select.state_dict()
    assert got["history"]["keys"] == want["history"]["keys"] and got["skipped"] == want["skipped"] > 0
    for name in ("groups", "no_signal", "solved"):
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
