"""Rollout allocation (screening) in TRL's GRPOTrainer: merged groups, TRL's advantages, counts, resume.

Real tiny GRPO trainings on the toy dataset: ``num_generations=4``, a pilot of 2, 8 rows per generation
batch (B = 2 groups).
"""

import pytest
import torch
from engine_counter import engine_counter
from toy_rewards import checksum_reward, parity_reward

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.allocation import grpo_advantages
from dataflex_callbacks.integrations.trl.rounds import assemble, pad_id, row_payload

GENERATIONS, PILOT = 4, 2
SETTINGS = dict(per_device_train_batch_size=8, num_generations=GENERATIONS)
SCREEN = {"allocation": {"name": "screen", "params": {"pilot": PILOT}}}


def run(make_trainer, strategy=SCREEN, steps=3, **config):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[checksum_reward],
        max_steps=steps,
        trainer_kwargs={"strategy": strategy, "record_decisions": True},
        **{**SETTINGS, **config},
    )
    trainer.engine_rows = engine_counter(trainer)
    trainer.train()
    return trainer


# ------------------------------------------------------------------ merged groups = TRL's own groups


def split_round(trainer, prompts):
    """TRL's scoring of ``prompts`` x G, and the same rows re-assembled from two "rounds" (pilot, commit) per group."""
    inputs = [{"prompt": p} for p in prompts for _ in range(GENERATIONS)]
    calculate, seen = trainer._calculate_rewards, {}

    def keep(*args, **kwargs):
        seen["rewards"] = calculate(*args, **kwargs)
        return seen["rewards"]

    trainer._calculate_rewards = keep
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by train(); the loss reads it
    output = trainer._generate_and_score_completions(inputs)
    rows = row_payload(inputs, output, seen["rewards"])
    pilot = [i for i in range(len(rows)) if i % GENERATIONS < PILOT]
    commit = [i for i in range(len(rows)) if i % GENERATIONS >= PILOT]
    # Each "round" padded to its own widths, as two generation calls would be.
    pilot_rows = row_payload(*_cut(inputs, output, seen["rewards"], pilot))
    commit_rows = row_payload(*_cut(inputs, output, seen["rewards"], commit))
    merged = []
    for group in range(len(prompts)):
        merged += pilot_rows[group * PILOT : (group + 1) * PILOT]
        merged += commit_rows[group * (GENERATIONS - PILOT) : (group + 1) * (GENERATIONS - PILOT)]
    _, assembled, rewards = assemble(merged, pad_id=pad_id(trainer))
    assembled["advantages"] = grpo_advantages(trainer, rewards, torch.arange(len(merged)) // GENERATIONS, len(prompts))
    assembled["num_items_in_batch"] = output["num_items_in_batch"]
    return output, assembled


def _cut(inputs, output, rewards, rows):
    index = torch.tensor(rows)
    cut = {}
    for key, value in output.items():
        if key == "num_items_in_batch":
            continue
        value = value[index]
        if value.dim() == 2 and key.startswith("completion"):
            width = int(output["completion_mask"][index].sum(1).max())
            value = value[:, : max(width, 1)]
        cut[key] = value
    for key in ("old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps", "tool_mask"):
        if key in cut and cut[key].dim() == 2:
            cut[key] = cut[key][:, : cut["completion_mask"].shape[1]]
    return [inputs[i] for i in rows], cut, rewards[index]


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_merged_groups_get_trls_advantages_and_loss(make_trainer, scale_rewards, loss_type):
    trainer = make_trainer(
        reward_funcs=[checksum_reward, parity_reward],
        scale_rewards=scale_rewards,
        loss_type=loss_type,
        gradient_accumulation_steps=2,  # TRL then keeps old log-probs per row: they must follow the row
        **SETTINGS,
    )
    output, merged = split_round(trainer, ["12+5=", "3+3=", "7+0=", "40+5="])
    assert torch.equal(merged["completion_ids"][:, : output["completion_ids"].shape[1]], output["completion_ids"])
    assert torch.allclose(merged["advantages"], output["advantages"], atol=0, rtol=0)
    assert output["advantages"].abs().sum() > 0, "no group had signal: the comparison is void"
    if "old_per_token_logps" in output:
        width = output["old_per_token_logps"].shape[1]
        assert torch.equal(merged["old_per_token_logps"][:, :width], output["old_per_token_logps"])
    assert torch.allclose(
        trainer._compute_loss(trainer.model, merged), trainer._compute_loss(trainer.model, output), atol=1e-6
    )


def test_merged_groups_get_trls_advantages_with_normalize_then_sum(make_trainer):
    trainer = make_trainer(
        reward_funcs=[checksum_reward, parity_reward], multi_objective_aggregation="normalize_then_sum", **SETTINGS
    )
    output, merged = split_round(trainer, ["12+5=", "3+3=", "7+0=", "40+5="])
    assert torch.allclose(merged["advantages"], output["advantages"], atol=0, rtol=0)


# ------------------------------------------------------------------ a screened run


def test_a_screened_run_trains_full_groups_and_counts_equal_the_engines(make_trainer):
    trainer = run(make_trainer, steps=3)
    decisions = trainer.dataflex.decisions
    assert len(decisions) == 3
    for decision in decisions:
        assert decision["keep"].shape == (8,)  # B = 2 groups of G = 4, as a stock step
        keys = decision["prompt_keys"]
        assert all(len(set(keys[g * 4 : (g + 1) * 4])) == 1 for g in range(2))
    last = decisions[-1]["dynamic"]
    assert last["alloc/generated"] == sum(trainer.engine_rows)
    assert last["alloc/pilot_completions"] + last["alloc/commit_completions"] == sum(trainer.engine_rows)
    assert last["alloc/trained_groups"] == 6
    metrics = [entry for entry in trainer.state.log_history if "dataflex/alloc/generated" in entry]
    assert metrics and metrics[-1]["dataflex/alloc/generated"] == last["alloc/generated"]


def test_committed_groups_carry_signal_unless_forced(make_trainer):
    trainer = run(make_trainer, steps=3)
    for decision in trainer.dataflex.decisions:
        unforced = 2 - int(decision["dynamic"]["alloc/forced_groups"])
        spread = decision["rewards"].view(2, GENERATIONS)
        with_signal = int((spread.max(1).values > spread.min(1).values).sum())
        assert with_signal >= unforced


def test_resume_equals_the_uninterrupted_run(make_trainer, tmp_path):
    checkpoints = dict(save_strategy="steps", save_steps=2, output_dir=str(tmp_path / "full"))
    full = run(make_trainer, steps=3, **checkpoints)
    resumed = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[checksum_reward],
        max_steps=3,
        trainer_kwargs={"strategy": SCREEN, "record_decisions": True},
        **{**SETTINGS, **checkpoints, "output_dir": str(tmp_path / "resumed")},
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert len(resumed.dataflex.decisions) == 1
    a, b = full.dataflex.decisions[2], resumed.dataflex.decisions[0]
    assert a["prompt_keys"] == b["prompt_keys"] and a["dynamic"] == b["dynamic"]
    assert full.dataflex.allocation.state_dict() == resumed.dataflex.allocation.state_dict()


def test_what_cannot_run_is_refused_in_one_line(make_trainer):
    with pytest.raises(ConfigError, match="mix part"):
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "screen+static"}, **SETTINGS)
    with pytest.raises(ConfigError, match="pilot"):
        make_trainer(
            cls=DataFlexGRPOTrainer,
            trainer_kwargs={"strategy": {"allocation": {"name": "screen", "params": {"pilot": 4}}}},
            **SETTINGS,
        )
    one = {"allocation": {"name": "screen", "params": {"pilot": 1, "rule": "posterior"}}}
    with pytest.raises(ConfigError, match="one completion never varies") as error:
        make_trainer(
            cls=DataFlexGRPOTrainer,
            trainer_kwargs={"strategy": {**one, "pre_select": {"name": "skip_zero_variance", "params": {}}}},
            **SETTINGS,
        )
    assert "\n" not in str(error.value) and "pilot >= 2" in str(error.value)


def test_the_async_trainer_and_rloo_refuse_the_part_in_one_line():
    from dataflex_callbacks import build_strategy
    from dataflex_callbacks.integrations.trl.async_host import check_async_strategy
    from dataflex_callbacks.integrations.trl.rloo import DataFlexRLOOCallback

    check_async_strategy(build_strategy("screen"))  # runs through the in-process worker (test_async_grpo.py)
    with pytest.raises(ConfigError, match="groups differ in size") as error:
        check_async_strategy(build_strategy("adaptive"))
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="allocation is not supported"):
        DataFlexRLOOCallback("screen")
