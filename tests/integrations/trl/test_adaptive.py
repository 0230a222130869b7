"""``adaptive`` (AR3PO) in TRL's GRPOTrainer: groups of different sizes in TRL's fixed batch, masked filler rows.

Real tiny GRPO trainings on the toy dataset (16 rows a generation batch: 4 prompts of ``num_generations=4``, stages
of 2 up to 4 or 6), and one short ``dataflex run --strategy adaptive`` on the testbed.
"""

import json

import pytest
import torch
from engine_counter import engine_counter
from loss_checks import loss_and_grad
from toy_rewards import checksum_reward, parity_reward

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.allocation import grpo_advantages
from dataflex_callbacks.integrations.trl.callback import KEEP_KEY

SETTINGS = dict(per_device_train_batch_size=16, num_generations=4)


def adaptive(stage=2, cap=4, **params):
    return {"allocation": {"name": "adaptive", "params": {"stage": stage, "cap": cap, **params}}}


# ------------------------------------------------------------------ advantages per group, as TRL computes a group


def per_group_reference(trainer, rewards_per_func, sizes):
    """TRL's formula applied group by group (``nanmean``/``nanstd`` over each group's own rows), in a Python loop."""
    from trl.trainer.utils import nanstd

    weights = trainer.reward_weights.unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    bounds = torch.cumsum(torch.tensor([0, *sizes]), 0).tolist()
    groups = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if trainer.multi_objective_aggregation == "normalize_then_sum":
        parts = []
        for g in groups:
            x = rewards_per_func[g]
            parts.append((x - torch.nanmean(x, dim=0, keepdim=True)) / (nanstd(x, dim=0, keepdim=True) + 1e-4))
        rewards = (torch.cat(parts) * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4), nan=0.0)
    rewards = (rewards_per_func * weights).nansum(dim=1)
    rewards[unscorable] = torch.nan
    out = []
    for g in groups:
        advantages = rewards[g] - torch.nanmean(rewards[g])
        if trainer.scale_rewards == "group":
            advantages = advantages / (nanstd(rewards[g]) + 1e-4)
        elif trainer.scale_rewards == "batch":
            advantages = advantages / (nanstd(rewards) + 1e-4)
        out.append(advantages)
    return torch.nan_to_num(torch.cat(out), nan=0.0)


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_of_groups_of_different_sizes_are_trls_per_group(make_trainer, scale_rewards, aggregation):
    trainer = make_trainer(
        reward_funcs=[checksum_reward, parity_reward],
        scale_rewards=scale_rewards,
        multi_objective_aggregation=aggregation,
        reward_weights=[1.0, 0.5],
        **SETTINGS,
    )
    sizes = [2, 6, 4, 1, 3, 8]
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (sum(sizes), 2), generator=generator).float()
    rewards[3, 0] = torch.nan  # one reward function returned None for a row
    rewards[7] = torch.nan  # none scored this row: advantage 0
    index = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    got = grpo_advantages(trainer, rewards, index, len(sizes))
    expected = per_group_reference(trainer, rewards, sizes)
    assert expected.abs().sum() > 0
    assert torch.allclose(got, expected, atol=1e-6, rtol=1e-6), (got - expected).abs().max()
    shuffled = torch.randperm(len(index), generator=generator)  # groups need not be contiguous
    again = grpo_advantages(trainer, rewards[shuffled], index[shuffled], len(sizes))
    assert torch.allclose(again, got[shuffled], atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------ a step: real rows, fillers, TRL's loss


def one_step(trainer):
    """One generation batch through the adapter (TRL's ``_generate_and_score_completions``, wrapped)."""
    trainer.current_gradient_accumulation_steps = 1  # set by train(); the loss reads it
    trainer.model.train()
    inputs = next(iter(trainer.get_train_dataloader()))
    return inputs, trainer._generate_and_score_completions(inputs)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_a_step_of_groups_of_different_sizes_trains_as_trl_on_its_real_rows(make_trainer, loss_type):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[checksum_reward],
        loss_type=loss_type,
        trainer_kwargs={"strategy": adaptive(), "record_decisions": True},
        **SETTINGS,
    )
    inputs, output = one_step(trainer)
    keep = output[KEEP_KEY]
    assert keep.numel() == len(inputs) == 16  # TRL's fixed shapes
    logged = {name: values[-1] for name, values in trainer._metrics["train"].items() if values}
    sizes = (logged["dataflex/alloc/step_group_size_min"], logged["dataflex/alloc/step_group_size_max"])
    assert sizes[0] < sizes[1], sizes  # the step under test has groups of different sizes
    assert int(keep.sum()) == logged["dataflex/alloc/step_generated"] == 16 - logged["dataflex/alloc/step_filler_rows"]
    assert not keep[int(keep.sum()) :].any()  # one process: real rows first, then the fillers

    _, grad = loss_and_grad(trainer, trainer._compute_loss, output)
    real = keep.nonzero().flatten()
    alone = {  # TRL's own loss (no adapter key) on the real rows alone: a step whose batch is those groups
        key: value[real] if isinstance(value, torch.Tensor) and value.dim() >= 1 else value
        for key, value in output.items()
        if not key.startswith("dataflex_") and key != "tool_mask"
    }
    alone["num_items_in_batch"] = alone["completion_mask"].sum()
    _, expected = loss_and_grad(trainer, trainer._compute_loss, alone)
    assert expected.abs().sum() > 0
    assert torch.allclose(grad, expected, atol=1e-6, rtol=1e-5), (grad - expected).abs().max()


def test_an_adaptive_run_counts_what_the_engine_generated_and_logs_group_sizes(make_trainer):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[checksum_reward],
        max_steps=3,
        trainer_kwargs={"strategy": adaptive(cap=6), "record_decisions": True},
        **SETTINGS,
    )
    seen = engine_counter(trainer)
    trainer.train()
    decisions = trainer.dataflex.decisions
    assert decisions[-1]["dynamic"]["alloc/generated"] == sum(seen)
    assert set(seen) <= {2 * 4, 2 * 3, 2 * 2, 2}  # stages of 2 per prompt, one call per stage
    for decision in decisions:
        metrics = decision["dynamic"]
        assert int(decision["keep"].sum()) == metrics["alloc/step_generated"]
        assert metrics["alloc/step_group_size_max"] <= 6
    logged = [entry for entry in trainer.state.log_history if "dataflex/alloc/step_group_size_max" in entry]
    assert len(logged) == 3 and all("dataflex/alloc/reused_responses" in entry for entry in logged)


def test_what_adaptive_cannot_run_is_refused_in_one_line(make_trainer):
    with pytest.raises(ConfigError, match="first stage of 8 completions per prompt above num_generations = 4") as error:
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": adaptive(stage=8, cap=8)}, **SETTINGS)
    assert "\n" not in str(error.value) and "set stage <= 4" in str(error.value)
    with pytest.raises(ConfigError, match="adaptive' with a pre_select part"):  # reuse runs (test_adaptive_reuse.py)
        make_trainer(
            cls=DataFlexGRPOTrainer,
            trainer_kwargs={"strategy": {**adaptive(reuse=True), "pre_select": "skip_zero_variance"}},
            **SETTINGS,
        )


def test_the_async_trainer_names_why_it_cannot_run_adaptive():
    from dataflex_callbacks import build_strategy
    from dataflex_callbacks.integrations.trl.async_host import check_async_strategy

    with pytest.raises(ConfigError, match="neither runs stages until a pass") as error:
        check_async_strategy(build_strategy("adaptive"))
    assert "\n" not in str(error.value) and "DataFlexGRPOTrainer" in str(error.value)


# ------------------------------------------------------------------ acceptance: dataflex run on the testbed


def test_dataflex_run_adaptive_trains_on_the_testbed_with_groups_of_different_sizes(tmp_path):
    from dataflex_callbacks.recipes.cli import main

    folder = tmp_path / "adaptive"
    assert main(["run", "--strategy", "adaptive", "--steps", "3", "--no-progress", "--n-test", "20",
                 "--output-dir", str(folder)]) == 0  # fmt: skip
    steps = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    steps = [entry for entry in steps if "dataflex/alloc/step_group_size_max" in entry]
    assert len(steps) == 3
    assert any(s["dataflex/alloc/step_group_size_min"] < s["dataflex/alloc/step_group_size_max"] for s in steps)
    assert all("dataflex/alloc/reused_responses" in s for s in steps)
    config = json.loads((folder / "config.json").read_text())
    assert config["completions_generated"] == sum(s["dataflex/alloc/step_generated"] for s in steps)
    assert config["reused_responses"] == 0  # the preset does not reuse (reuse: false)
