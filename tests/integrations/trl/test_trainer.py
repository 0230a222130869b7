"""End-to-end runs of the TRL adapter on the tiny model: both ways in, metrics, errors, resume, PEFT."""

import pytest
import torch
from toy_rewards import same_state

from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexGRPOTrainer, DataFlexRLOOTrainer, attach
from dataflex_callbacks.integrations.trl.lifecycle import STATE_FILE
from dataflex_callbacks.integrations.trl.signals import resolve_reward_index, selection_rewards

MIXED_STRATEGY = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 1},
}


def assert_same_history(first, second):
    assert [h["step"] for h in first] == [h["step"] for h in second]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a["keep"], b["keep"]) and torch.equal(a["weights"], b["weights"])
        assert a["metrics"] == b["metrics"]


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_both_ways_in_make_the_same_decisions_and_log_metrics(make_trainer):
    subclass = make_trainer(
        cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "difffilter", "record_decisions": True}
    )
    subclass.train()
    stock = make_trainer()
    callback = attach(stock, "difffilter", record_decisions=True)
    stock.train()

    assert len(subclass.dataflex.decisions) == 2
    assert_same_history(subclass.dataflex.decisions, callback.decisions)
    for a, b in zip(subclass.model.parameters(), stock.model.parameters(), strict=True):
        assert torch.equal(a, b)
    for key in ("dataflex/kept_frac", "dataflex/ess", "dataflex/weight_mean", "dataflex/weight_std"):
        assert len(logged(subclass, key)) == 2, key  # one value per logging step
    steps = [entry for entry in subclass.state.log_history if "loss" in entry]
    # the per-domain selection reward, at every step
    assert all(any(key.startswith("dataflex/selection_reward/") for key in entry) for entry in steps)
    kept = torch.stack([h["keep"] for h in subclass.dataflex.decisions])
    assert logged(subclass, "dataflex/kept_frac") == pytest.approx(kept.float().mean(1).tolist())


def test_unattached_callback_fails_at_train_begin_with_the_fix(make_trainer):
    trainer = make_trainer(trainer_kwargs={"callbacks": [DataFlexCallback("difffilter")]})
    with pytest.raises(RuntimeError, match=r"attach\(trainer, strategy\)"):
        trainer.train()


def test_attach_binds_a_callback_passed_in_callbacks(make_trainer):
    callback = DataFlexCallback("difffilter", record_decisions=True)
    trainer = make_trainer(max_steps=1, trainer_kwargs={"callbacks": [callback]})
    assert attach(trainer) is callback
    trainer.train()
    assert len(callback.decisions) == 1
    with pytest.raises(RuntimeError, match="only once"):
        attach(trainer)


def test_unknown_selection_reward_lists_the_reward_functions(make_trainer, reward_functions):
    with pytest.raises(ValueError, match=r"\['parity_reward', 'digit_reward'\]"):
        make_trainer(
            cls=DataFlexGRPOTrainer,
            reward_funcs=[reward_functions["parity_reward"], reward_functions["digit_reward"]],
            trainer_kwargs={"strategy": "difffilter", "selection_reward": "nope"},
        )


def test_selection_reward_picks_one_function_or_the_weighted_sum():
    rewards = torch.tensor([[1.0, 0.2], [0.0, float("nan")], [float("nan"), float("nan")]])
    weights = torch.tensor([1.0, 0.5])
    assert resolve_reward_index("digit_reward", ["parity_reward", "digit_reward"]) == 1
    assert torch.allclose(selection_rewards(rewards, weights, 0), rewards[:, 0], equal_nan=True)
    summed = selection_rewards(rewards, weights, None)
    assert summed[:2].tolist() == pytest.approx([1.1, 0.0]) and torch.isnan(summed[2])


def test_named_selection_reward_runs(make_trainer, reward_functions):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=1,
        reward_funcs=[reward_functions["parity_reward"], reward_functions["digit_reward"]],
        trainer_kwargs={"strategy": "difffilter", "selection_reward": "parity_reward"},
    )
    trainer.train()
    assert logged(trainer, "dataflex/kept_frac")


@pytest.mark.parametrize("host", ["grpo", "rloo"])
def test_a_resumed_run_equals_the_uninterrupted_run(host, request, tmp_path):
    make, trainer_class = {"grpo": ("make_trainer", DataFlexGRPOTrainer), "rloo": ("make_rloo", DataFlexRLOOTrainer)}[
        host
    ]
    make = request.getfixturevalue(make)
    settings = dict(
        cls=trainer_class,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        output_dir=str(tmp_path / "full"),
        trainer_kwargs={"strategy": MIXED_STRATEGY, "record_decisions": True},
    )
    full = make(**settings)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-2"
    assert (checkpoint / STATE_FILE).is_file()
    assert full.dataflex.sampler is not None  # the mix part draws prompts through the DomainMixingSampler
    # The mix part's tracker has seen two steps of rewards: the state that must survive the restart.
    assert any(k.startswith("mix/target/") for k in full.dataflex.decisions[-1]["metrics"])

    settings["output_dir"] = str(tmp_path / "resumed")
    resumed = make(**settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert_same_history(full.dataflex.decisions[2:], resumed.dataflex.decisions)
    assert [h["prompt_keys"] for h in full.dataflex.decisions[2:]] == [
        h["prompt_keys"] for h in resumed.dataflex.decisions
    ]
    assert resumed.dataflex.sampler.state_dict() == full.dataflex.sampler.state_dict()
    assert same_state(resumed.dataflex.strategy.state_dict(), full.dataflex.strategy.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True))


def test_peft_lora_with_reused_generations_and_kl(make_trainer, reward_functions):
    peft = pytest.importorskip("peft")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        peft_config=lora,
        num_iterations=2,
        beta=0.04,
        max_steps=3,
        gradient_accumulation_steps=2,
        loss_type="dapo",
        reward_funcs=[reward_functions["checksum_reward"]],
        trainer_kwargs={"strategy": "difffilter", "record_decisions": True},
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    # steps_per_generation=2 micro-batches x num_iterations=2 passes = 4 micro-steps = 2 optimizer steps
    # per generation round, so one decision serves two optimizer steps.
    assert [h["step"] for h in trainer.dataflex.decisions] == [0, 2]
    assert all(h["keep"].numel() == 8 for h in trainer.dataflex.decisions)
    assert all(torch.isfinite(torch.tensor(v)) for v in logged(trainer, "loss"))
    assert logged(trainer, "kl")
    after = {n: p.detach() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert any(not torch.equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize("strategy", ["ar", "entropy_top"])
def test_policy_signal_strategies_train_and_log_token_metrics(make_trainer, strategy):
    trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": strategy})
    trainer.train()
    assert len(logged(trainer, "dataflex/token/ess")) == 2
    assert all(0.0 < v <= 1.0 for v in logged(trainer, "dataflex/token/ess"))


def test_unsupported_host_trainer_is_rejected():
    class NotGRPO:
        pass

    with pytest.raises(TypeError, match="GRPOTrainer"):
        DataFlexCallback("difffilter").bind(NotGRPO())


@pytest.mark.parametrize(
    "loss_type,extra",
    [
        ("grpo", {}),
        ("dapo", {"gradient_accumulation_steps": 2}),
        ("dr_grpo", {"entropy_coef": 0.01}),
        ("bnpo", {"num_iterations": 2}),
        ("luspo", {"importance_sampling_level": "sequence"}),
    ],
)
def test_baseline_is_bit_identical_to_stock_trl(make_trainer, loss_type, extra):
    stock = make_trainer(loss_type=loss_type, **extra)
    stock.train()
    ours = make_trainer(cls=DataFlexGRPOTrainer, loss_type=loss_type, trainer_kwargs={"strategy": "baseline"}, **extra)
    ours.train()
    for a, b in zip(stock.model.parameters(), ours.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert logged(stock, "loss") == logged(ours, "loss")
