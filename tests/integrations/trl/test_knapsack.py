"""``knapsack`` (Knapsack RL) in TRL's GRPOTrainer: a per-step completion budget spread over TRL's drawn prompts, run
through the stages of groups of different sizes (`Allocation.generate_stages`), masked filler rows up to TRL's batch;
``fewer_groups_loss: batch`` over those fillers; and the hosts that refuse it.

Real tiny GRPO trainings on the toy dataset (domains ``add``, ``mul``, ``echo``): 16 rows a generation batch, 4 prompts
of ``num_generations=4``, a budget of 0.5 (8 completions a step).
"""

import pytest
import torch
from loss_checks import batch_normaliser_grads
from toy_rewards import checksum_reward

from dataflex_callbacks import build_strategy
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import REFUSED, host_declaration
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.async_host import check_async_strategy
from dataflex_callbacks.integrations.trl.callback import KEEP_KEY
from dataflex_callbacks.integrations.verl import host as verl_host  # noqa: F401  (registers the verl hosts)
from dataflex_callbacks.integrations.verl.config import strategy_from_verl_config

GENERATIONS, PROMPTS, BUDGET, STEPS = 4, 4, 0.5, 6
SETTINGS = dict(per_device_train_batch_size=PROMPTS * GENERATIONS, num_generations=GENERATIONS)


def knapsack(**params):
    return {"allocation": {"name": "knapsack", "params": {"budget": BUDGET, **params}}}


def echo_never_solved(prompts, completions, domain, **kwargs):
    """0 for every completion of an ``echo`` prompt (a domain the model never solves), else the checksum reward."""
    return [0.0 if d == "echo" else c for d, c in zip(domain, checksum_reward(completions), strict=True)]


def test_a_knapsack_run_stays_within_its_budget_and_stops_spending_on_a_domain_that_never_passes(make_trainer):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[echo_never_solved],
        max_steps=STEPS,
        trainer_kwargs={"strategy": knapsack(explore=0.0), "record_decisions": True},
        **SETTINGS,
    )
    trainer.train()
    decisions = trainer.dataflex.decisions
    assert len(decisions) == STEPS
    for decision in decisions:
        metrics = decision["dynamic"]
        assert 0 < metrics["alloc/step_generated"] <= BUDGET * PROMPTS * GENERATIONS == metrics["alloc/step_budget"]
        assert int(decision["keep"].sum()) == metrics["alloc/step_generated"]  # real rows train, fillers are masked
        assert metrics["alloc/step_filler_rows"] == PROMPTS * GENERATIONS - metrics["alloc/step_generated"]
    echo = [d["dynamic"].get("alloc/pilot_completions/echo", 0.0) for d in decisions]  # cumulative
    seen = next(i for i, count in enumerate(echo) if count > 0)  # the step its evidence starts
    assert seen < STEPS - 2, echo  # the run under test draws echo prompts early enough to see them fall
    assert echo[-1] == echo[seen], echo  # no echo completion once its domain has evidence
    others = [d["dynamic"]["alloc/generated"] for d in decisions]
    assert others[-1] - echo[-1] > others[seen] - echo[seen]  # the budget went to the other domains


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_fewer_groups_loss_batch_counts_a_knapsack_steps_fillers_as_groups_without_signal(make_trainer, loss_type):
    """With ``fewer_groups_loss: batch`` the real rows' update is their own loss scaled by real rows / TRL's rows: the
    fillers count as zero-advantage rows, as for a step of fewer groups (test_fewer_groups.py)."""
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        loss_type=loss_type,
        reward_funcs=[checksum_reward],
        trainer_kwargs={"strategy": {**knapsack(), "fewer_groups_loss": "batch"}},
        **SETTINGS,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by train(); the loss reads it
    trainer.model.train()
    output = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    kept = output[KEEP_KEY]
    assert 0 < int(kept.sum()) <= BUDGET * kept.numel()  # fillers in the batch: the normalisers differ
    grad, expected = batch_normaliser_grads(trainer, output)
    assert torch.allclose(grad, expected, atol=1e-6, rtol=1e-5), (grad - expected).abs().max()


def test_what_cannot_run_knapsack_is_refused_in_one_line(make_trainer):
    strategy = build_strategy("knapsack")
    needs = strategy.allocation_needs
    assert not needs.equal_groups and needs.rounds_per_step == 1 and strategy.allocation_first_round(4) == 2
    assert host_declaration("trl").serves(needs) != REFUSED
    assert host_declaration("verl").serves(needs) == REFUSED
    with pytest.raises(ConfigError, match="allocation 'knapsack' \\(its groups differ in size") as error:
        check_async_strategy(strategy)
    assert "\n" not in str(error.value) and "DataFlexGRPOTrainer" in str(error.value)
    with pytest.raises(ConfigError, match=r"'knapsack' is not run by verl's dataflex_sync trainer \(its groups differ"):
        strategy_from_verl_config({"dataflex": {"strategy": "knapsack"}})  # a plain mapping, as verl's config reads
    with pytest.raises(ConfigError, match="first stage of 8 completions per prompt above num_generations = 4"):
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": knapsack(stage=8, cap=8)}, **SETTINGS)
