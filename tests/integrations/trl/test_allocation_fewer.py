"""``screen`` with ``refill: false`` in a real TRL GRPOTrainer step: one screening round over the drawn prompts, only
the committed groups train (masked fillers keep TRL's shapes), and the update equals a step of those groups alone.

Tiny trainings on the toy dataset: ``num_generations=4``, a pilot of 2, 16 rows per generation batch (B = 4 prompts).
"""

import pytest
import torch
from engine_counter import engine_counter

from dataflex_callbacks import build_strategy
from dataflex_callbacks.errors import ConfigError, ParamError
from dataflex_callbacks.host import REFUSED, host_declaration
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.async_host import check_async_strategy
from dataflex_callbacks.integrations.trl.callback import KEEP_KEY
from dataflex_callbacks.integrations.trl.loss_scaling import SUPPORTED_LOSS_TYPES
from dataflex_callbacks.integrations.verl import host as verl_host  # noqa: F401  (registers the verl hosts)
from dataflex_callbacks.recipes.completion_accounting import logged_generated

from .loss_checks import grad_of_rows_alone, loss_and_grad

GENERATIONS, PILOT, PROMPTS = 4, 2, 4


def code_parity_reward(completions, **kwargs):
    """A reward that varies within a group: the parity of the completion's character codes."""
    return [float(sum(map(ord, completion)) % 2) for completion in completions]


FEWER = {"allocation": {"name": "screen", "params": {"pilot": PILOT, "refill": False}}}


def step(make_trainer, loss_type="grpo", strategy=FEWER):
    """One generation batch of a screen-without-refill trainer: its engine calls, batch dict and pilot rewards."""
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        loss_type=loss_type,
        reward_funcs=[code_parity_reward],
        per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS,
        trainer_kwargs={"strategy": strategy, "record_decisions": True},
    )
    trainer.engine_rows = engine_counter(trainer)
    trainer.current_gradient_accumulation_steps = 1  # set by train(); the loss reads it
    trainer.model.train()
    inputs = next(iter(trainer.get_train_dataloader()))
    return trainer, trainer._generate_and_score_completions(inputs)


@pytest.mark.parametrize("loss_type", SUPPORTED_LOSS_TYPES)
def test_a_step_trains_only_the_committed_groups_and_equals_a_step_of_them(make_trainer, loss_type):
    trainer, output = step(make_trainer, loss_type)
    decision = trainer.dataflex.decisions[-1]
    metrics = decision["dynamic"]
    groups = int(metrics["alloc/step_groups"])
    assert 0 < groups < PROMPTS, metrics  # the step under test commits some prompts, not all
    # One pilot of every drawn prompt, one commit of the committed ones: nothing refilled.
    assert trainer.engine_rows == [PROMPTS * PILOT, groups * (GENERATIONS - PILOT)]
    kept = output[KEEP_KEY]
    assert kept.numel() == PROMPTS * GENERATIONS and int(kept.sum()) == groups * GENERATIONS
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    assert logged_generated(logged) == sum(trainer.engine_rows)
    real = kept.nonzero().flatten()
    rewards = decision["rewards"][real].view(groups, GENERATIONS)
    forced = int(metrics["alloc/forced_groups"])
    assert int((rewards.max(1).values > rewards.min(1).values).sum()) >= groups - forced  # the rule's commits

    _, grad = loss_and_grad(trainer, trainer._compute_loss, output)
    expected = grad_of_rows_alone(trainer, output, real)  # TRL's loss on those rows alone
    assert expected.abs().sum() > 0  # the committed groups carry signal: the comparison is not 0 == 0
    assert torch.allclose(grad, expected, atol=1e-6, rtol=1e-5), (grad - expected).abs().max()


def test_groups_per_step_screens_until_the_step_holds_that_many_groups_and_equals_a_step_of_them(make_trainer):
    target = {"allocation": {"name": "screen", "params": {"pilot": PILOT, "groups_per_step": 2}}}
    trainer, output = step(make_trainer, strategy=target)
    metrics = trainer.dataflex.decisions[-1]["dynamic"]
    kept = output[KEEP_KEY]
    assert metrics["alloc/step_groups"] == 2 and int(kept.sum()) == 2 * GENERATIONS and kept.numel() == 16
    assert sum(trainer.engine_rows) == metrics["alloc/step_generated"]
    real = kept.nonzero().flatten()
    _, grad = loss_and_grad(trainer, trainer._compute_loss, output)
    expected = grad_of_rows_alone(trainer, output, real)  # TRL's loss on those rows alone
    assert torch.allclose(grad, expected, atol=1e-6, rtol=1e-5), (grad - expected).abs().max()


def test_a_step_where_no_pilot_commits_trains_one_forced_group(make_trainer):
    # band [0.99, 1]: a pilot of 2 commits only when both pass; where none does, the rule's first is forced.
    never = {"allocation": {"name": "screen", "params": {"pilot": PILOT, "refill": False, "rule": "band",
                                                         "lower": 0.99, "upper": 1.0}}}  # fmt: skip
    trainer, output = step(make_trainer, strategy=never)
    metrics = trainer.dataflex.decisions[-1]["dynamic"]
    committed = int(metrics["alloc/step_groups"]) - int(metrics["alloc/forced_groups"])
    assert int(metrics["alloc/step_groups"]) == max(committed, 1)
    assert int(output[KEEP_KEY].sum()) == int(metrics["alloc/step_groups"]) * GENERATIONS


def test_refill_is_declared_checked_and_refused_where_a_host_fills_each_step():
    strategy = build_strategy(FEWER)
    assert strategy.allocation_needs.refills is False
    assert build_strategy("screen").allocation_needs.refills is True
    assert build_strategy("screen_fewer").allocation_needs.refills is False
    with pytest.raises(ParamError, match="refill"):
        build_strategy({"allocation": {"name": "screen", "params": {"refill": "no"}}})
    with pytest.raises(ConfigError, match=r"allocation.refill=false is not supported by TRL's AsyncGRPOTrainer"):
        check_async_strategy(strategy)
    needs = strategy.allocation_needs
    assert host_declaration("trl").serves(needs) != REFUSED
    assert host_declaration("trl-async").serves(needs) == REFUSED
    assert host_declaration("trl-async").serves(build_strategy("screen").allocation_needs) != REFUSED
    target = build_strategy({"allocation": {"name": "screen", "params": {"groups_per_step": 4}}})
    assert target.allocation_needs.groups_per_step == 4 and target.allocation_needs.refills
    with pytest.raises(ConfigError, match=r"allocation.groups_per_step is not supported by TRL's AsyncGRPOTrainer"):
        check_async_strategy(target)
    assert host_declaration("verl").serves(target.allocation_needs) == REFUSED
    assert host_declaration("trl").serves(target.allocation_needs) != REFUSED
    with pytest.raises(ParamError, match="groups_per_step"):
        build_strategy({"allocation": {"name": "screen", "params": {"groups_per_step": 0}}})
