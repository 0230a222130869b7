"""The TRL adapter on ``trl.RLOOTrainer``: baseline equals stock, selection equals removal, resume, two processes.

RLOO has one loss (no ``loss_type``): the clipped surrogate on each row's sequence log-ratio, averaged
over the micro-batch's rows. Selection is checked against TRL's own ``RLOOTrainer._compute_loss`` on the
physically reduced batch, in the unclipped and the clipped regime and with asymmetric clipping.
"""

import warnings

import pytest
import torch
from loss_checks import loss_and_grad, masked_inputs, policy_weighted_step
from trl import RLOOTrainer
from two_ranks import run_two_ranks

from dataflex_callbacks import build_strategy
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import AGGREGATIONS, ROW_NORMALISED
from dataflex_callbacks.integrations.trl import (
    DataFlexCallback,
    DataFlexGRPOTrainer,
    DataFlexRLOOCallback,
    DataFlexRLOOTrainer,
    attach,
)
from dataflex_callbacks.recipes.tiny_model import build_tiny_model

TOLERANCE = 1e-6
ROWS, PROMPT_LEN, COMPLETION_LEN = 6, 4, 5
LENGTHS = [5, 3, 4, 1, 5, 2]
KEEPS = ([True, False, True, True, False, True], [False, True, False, False, True, False])
MIXED_STRATEGY = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 1},
}
DROP_EVERYTHING = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 2.0, "high": 3.0}}
}


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def same_parameters(first, second) -> bool:
    return all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))


def assert_same_history(first, second):
    assert [h["step"] for h in first] == [h["step"] for h in second]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a["keep"], b["keep"]) and torch.equal(a["weights"], b["weights"])
        assert a["metrics"] == b["metrics"]


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"normalize_advantages": True, "gradient_accumulation_steps": 2},
        {"num_iterations": 2, "epsilon_high": 0.28},
        {"beta": 0.05, "lora": True},
    ],
)
def test_baseline_is_bit_identical_to_stock_rloo(make_rloo, extra):
    extra = dict(extra)
    if extra.pop("lora", False):  # KL in the reward needs a reference model: with LoRA, the base model
        peft = pytest.importorskip("peft")
        lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        extra["trainer_kwargs"] = {"peft_config": lora}
    stock = make_rloo(**extra)
    before = [p.detach().clone() for p in stock.model.parameters()]
    stock.train()
    assert any(
        not torch.equal(a, b) for a, b in zip(before, stock.model.parameters(), strict=True)
    )  # training moved them
    extra["trainer_kwargs"] = dict(extra.get("trainer_kwargs", {}), strategy="baseline")
    ours = make_rloo(cls=DataFlexRLOOTrainer, **extra)
    ours.train()
    assert same_parameters(stock.model, ours.model)
    assert logged(stock, "loss") == logged(ours, "loss") and len(logged(ours, "loss")) == 2


def test_both_ways_in_make_the_same_decisions_and_log_metrics(make_rloo):
    subclass = make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": "difffilter", "record_decisions": True})
    subclass.train()
    stock = make_rloo()
    callback = attach(stock, "difffilter", record_decisions=True)
    assert isinstance(callback, DataFlexRLOOCallback) and callback.attached
    stock.train()
    assert len(subclass.dataflex.decisions) == 2
    assert_same_history(subclass.dataflex.decisions, callback.decisions)
    assert same_parameters(subclass.model, stock.model)
    kept = torch.stack([h["keep"] for h in subclass.dataflex.decisions])
    assert logged(subclass, "dataflex/kept_frac") == pytest.approx(kept.float().mean(1).tolist())


def test_dropped_rows_do_not_train(make_rloo, tiny_tokenizer):
    """A strategy that drops every row leaves the weights exactly as they were (zero advantage, zero gradient)."""
    with pytest.warns(UserWarning, match="dropped"):
        trainer = make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": DROP_EVERYTHING})
        trainer.train()
    assert logged(trainer, "dataflex/kept_frac") == [0.0, 0.0]
    assert same_parameters(trainer.model, build_tiny_model(tiny_tokenizer, seed=0))
    assert logged(trainer, "loss") == [0.0, 0.0]


@pytest.mark.parametrize("strategy", ["ar", "entropy_top"])
def test_policy_signal_strategies_train_and_log_token_metrics(make_rloo, strategy):
    trainer = make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": strategy})
    trainer.train()
    assert len(logged(trainer, "dataflex/token/ess")) == 2
    assert all(0.0 < v <= 1.0 for v in logged(trainer, "dataflex/token/ess"))


@pytest.mark.slow
def test_two_ranks_make_identical_decisions_without_hanging(tmp_path):
    ranks = run_two_ranks(tmp_path, "rloo")
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    for key in ("history", "stream", "sampler_state", "strategy_state", "parameters"):
        assert ranks[0][key] == ranks[1][key], key
    history = ranks[0]["history"]
    assert len(history) == 8 and all(len(h["keep"]) == 6 and len(h["prompt_keys"]) == 6 for h in history)
    # Rows 2 (rank 0) and 3 (rank 1) form one group; group selection keeps or drops it as a whole.
    assert all(h["keep"][2] == h["keep"][3] for h in history)
    assert any(any(h["keep"]) for h in history) and history[-1]["metrics"]["pre_select/skipped_prompts"] > 0


# ---------------------------------------------------------------- the loss: masking equals removal
@pytest.fixture(scope="module")
def bench(make_rloo):
    trainer = make_rloo(
        cls=DataFlexRLOOTrainer,
        trainer_kwargs={"strategy": "baseline"},
        max_completion_length=COMPLETION_LEN,
        per_device_train_batch_size=ROWS,
        num_generations=2,
    )
    trainer.model.train()
    gen = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (ROWS, PROMPT_LEN), generator=gen)
    completion_ids = torch.randint(3, vocab, (ROWS, COMPLETION_LEN), generator=gen)
    completion_mask = (torch.arange(COMPLETION_LEN).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).long()
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(ROWS, generator=gen),
    }
    with torch.no_grad():
        logps = token_logps(trainer, inputs)
    inputs["sequence_logps"] = (logps * completion_mask).sum(1)
    inputs["noise"] = torch.randn(ROWS, generator=gen)
    return trainer, inputs


def token_logps(trainer, inputs):
    """``(B, T)`` current-policy log-probabilities of the completion tokens (outside the loss: no weights)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, COMPLETION_LEN)
    return logps


def configured(bench, regime, epsilon_high):
    """The bench's inputs with ``old_logps`` near the policy's (``on_policy``) or far from it (``clipped``)."""
    trainer, inputs = bench
    trainer.epsilon_low, trainer.epsilon_high = 0.2, epsilon_high
    shift = {"on_policy": 0.0, "clipped": 0.6}[regime] * inputs["noise"]
    names = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")
    loss_inputs = {name: inputs[name] for name in names}
    loss_inputs["old_logps"] = inputs["sequence_logps"] - shift
    return trainer, loss_inputs


def stock_loss(trainer):
    return lambda model, inputs: RLOOTrainer._compute_loss(trainer, model, inputs)


def reduced(inputs, keep):
    return {k: v[keep] for k, v in inputs.items()}


def surrogate_is_clipped(trainer, inputs, sequence_logps) -> bool:
    """True when some row sits in the flat (clipped) part of the surrogate."""
    ratio = torch.exp(sequence_logps - inputs["old_logps"])
    advantages = inputs["advantages"]
    high = (ratio > 1 + trainer.epsilon_high) & (advantages > 0)
    low = (ratio < 1 - trainer.epsilon_low) & (advantages < 0)
    return bool((high | low).any())


@pytest.mark.parametrize("epsilon_high", [0.2, 0.28])
@pytest.mark.parametrize("regime", ["on_policy", "clipped"])
def test_selection_equals_physical_removal(bench, regime, epsilon_high):
    trainer, inputs = configured(bench, regime, epsilon_high)
    for keep in map(torch.tensor, KEEPS):
        loss, grad = loss_and_grad(trainer, trainer._compute_loss, masked_inputs(trainer, inputs, keep))
        ref_loss, ref_grad = loss_and_grad(trainer, stock_loss(trainer), reduced(inputs, keep))
        assert ref_loss.abs().item() > 1e-3 and ref_grad.abs().max().item() > 1e-3
        assert (loss - ref_loss).abs().item() <= TOLERANCE, (regime, keep)
        assert (grad - ref_grad).abs().max().item() <= TOLERANCE, (regime, keep)
    assert surrogate_is_clipped(trainer, inputs, bench[1]["sequence_logps"]) == (regime == "clipped")


def test_dropping_everything_gives_zero_loss_and_gradient(bench):
    trainer, inputs = configured(bench, "clipped", 0.2)
    masked = masked_inputs(trainer, inputs, torch.zeros(ROWS, dtype=torch.bool))
    loss, grad = loss_and_grad(trainer, trainer._compute_loss, masked)
    assert loss.item() == 0.0 and torch.isfinite(grad).all() and grad.abs().max().item() == 0.0


@pytest.mark.parametrize("keep", [[True] * ROWS, KEEPS[0]])
@pytest.mark.parametrize("regime", ["on_policy", "clipped"])
def test_response_weights_scale_each_kept_rows_gradient(bench, regime, keep):
    """Gradient == sum over kept rows of w_i * (gradient of row i's term in the reduced batch)."""
    trainer, inputs = configured(bench, regime, 0.28)
    keep = torch.tensor(keep)
    weights = torch.tensor([0.5, 2.0, 1.0, 0.25, 1.5, 0.75]) * keep
    _, grad = loss_and_grad(trainer, trainer._compute_loss, masked_inputs(trainer, inputs, keep, weights))
    kept = reduced(inputs, keep)
    reference = torch.zeros_like(grad)
    for row, weight in enumerate(weights[keep]):
        only_row = dict(kept, advantages=kept["advantages"] * (torch.arange(len(weights[keep])) == row))
        _, row_grad = loss_and_grad(trainer, stock_loss(trainer), only_row)
        reference += weight * row_grad
    assert (grad - reference).abs().max().item() <= TOLERANCE


def sequence_surrogate(trainer, sequence_logps, inputs):
    """RLOO's loss as a function of each row's sequence log-prob: mean_i -min(r_i A_i, clip(r_i) A_i)."""
    ratio = torch.exp(sequence_logps - inputs["old_logps"])
    clipped = ratio.clamp(1 - trainer.epsilon_low, 1 + trainer.epsilon_high)
    return -torch.min(ratio * inputs["advantages"], clipped * inputs["advantages"]).mean()


@pytest.mark.parametrize("regime", ["on_policy", "clipped"])
def test_policy_token_weights_weight_each_tokens_share_of_the_sequence_gradient(bench, regime):
    """`ar` weights (from the current policy, inside the loss) give sum_i dL/ds_i * sum_t w_it * grad logp_it."""
    trainer, inputs = configured(bench, regime, 0.28)
    strategy = build_strategy("ar")
    previous = trainer.dataflex.strategy
    trainer.dataflex.strategy = strategy
    try:
        mask = inputs["completion_mask"]
        decision, grad, token_weights = policy_weighted_step(trainer, strategy, inputs, COMPLETION_LEN)
        assert token_weights.shape == (ROWS, COMPLETION_LEN) and not torch.allclose(token_weights, mask.float())

        def reference_loss(model, loss_inputs):
            per_token = token_logps(trainer, loss_inputs)
            sequence = (per_token * mask).sum(1).detach().requires_grad_(True)
            (slope,) = torch.autograd.grad(sequence_surrogate(trainer, sequence, loss_inputs), sequence)
            return (slope.unsqueeze(1) * token_weights * mask * per_token).sum()

        _, reference = loss_and_grad(trainer, reference_loss, inputs)
        assert (grad - reference).abs().max().item() <= TOLERANCE
    finally:
        trainer.dataflex.strategy = previous


# ---------------------------------------------------------------- misuse
def test_an_rloo_loss_type_the_adapter_does_not_know_is_refused_with_the_fix(make_rloo):
    trainer = make_rloo()
    trainer.loss_type = "dapo"  # a TRL whose RLOOTrainer grew loss variants
    with pytest.raises(ValueError, match=r"RLOOTrainer loss_type='dapo' is not supported.*open an issue"):
        attach(trainer, "difffilter")


def test_a_grpo_callback_on_an_rloo_trainer_names_the_rloo_callback(make_rloo):
    trainer = make_rloo(trainer_kwargs={"callbacks": [DataFlexCallback("difffilter")]})
    with pytest.raises(TypeError, match="DataFlexRLOOCallback"):
        attach(trainer)


def test_the_rloo_callback_refuses_a_grpo_trainer(make_trainer):
    with pytest.raises(TypeError, match="works with trl.RLOOTrainer; got GRPOTrainer"):
        DataFlexRLOOCallback("difffilter").bind(make_trainer())


def test_trainer_without_a_strategy_says_how_to_give_one(make_rloo):
    with pytest.raises(ValueError, match=r"DataFlexRLOOTrainer\(\.\.\., strategy='difffilter'\)"):
        make_rloo(cls=DataFlexRLOOTrainer)


def test_trainer_uses_an_rloo_callback_passed_in_callbacks(make_rloo):
    callback = DataFlexRLOOCallback("difffilter", record_decisions=True)
    trainer = make_rloo(cls=DataFlexRLOOTrainer, max_steps=1, trainer_kwargs={"callbacks": [callback]})
    assert trainer.dataflex is callback and callback.attached and callback.trainer is trainer
    trainer.train()
    assert len(callback.decisions) == 1
    with pytest.raises(RuntimeError, match="already applies strategy 'difffilter'"):
        attach(trainer, "softmax")


def test_dropping_rows_with_a_moe_aux_loss_warns_about_the_rescale_with_rloo_advice(make_rloo):
    trainer = make_rloo()
    trainer.aux_loss_enabled = True  # RLOO adds the MoE aux loss inside the loss the B/K rescale multiplies
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        attach(trainer, "difffilter")
    messages = [str(w.message) for w in caught if "rescaled by B/K" in str(w.message)]
    assert len(messages) == 1
    assert "RLOOTrainer's loss" in messages[0] and "router_aux_loss_coef=0.0" in messages[0]
    assert "loss_type" not in messages[0]  # RLOOConfig has no loss_type to switch


def test_the_rloo_loss_is_the_row_mean_aggregation_of_the_core():
    assert DataFlexRLOOCallback("baseline").loss_aggregation(object()) == "sequence_mean"
    assert "sequence_mean" in ROW_NORMALISED and "sequence_mean" in AGGREGATIONS


# ---------------------------------------------------------------- one strategy, given once (as for GRPO)
def test_trainer_refuses_two_different_strategies_with_the_fix(make_rloo):
    with pytest.raises(ValueError, match=r"DataFlexRLOOTrainer got strategy='difffilter'.*two different strategies"):
        make_rloo(
            cls=DataFlexRLOOTrainer,
            trainer_kwargs={"strategy": "difffilter", "callbacks": [DataFlexRLOOCallback("softmax")]},
        )
    with pytest.raises(ValueError, match=r"selection_reward='checksum_reward'.*set it in one place"):
        make_rloo(
            cls=DataFlexRLOOTrainer,
            trainer_kwargs={"selection_reward": "checksum_reward", "callbacks": [DataFlexRLOOCallback("difffilter")]},
        )
    with pytest.raises(ValueError, match=r"callbacks=\[DataFlexRLOOCallback\] passes the class"):
        make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"callbacks": [DataFlexRLOOCallback]})


def test_trainer_with_the_same_strategy_in_a_callback_uses_that_callback(make_rloo):
    callback = DataFlexRLOOCallback("difffilter")
    trainer = make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": "difffilter", "callbacks": [callback]})
    assert trainer.dataflex is callback and callback.attached
    assert sum(isinstance(cb, DataFlexCallback) for cb in trainer.callback_handler.callbacks) == 1


def test_trainer_refuses_a_grpo_callback_naming_the_rloo_one(make_rloo):
    with pytest.raises(TypeError, match=r"DataFlexCallback, which is for trl.GRPOTrainer.*needs DataFlexRLOOCallback"):
        make_rloo(
            cls=DataFlexRLOOTrainer,
            trainer_kwargs={"strategy": "difffilter", "callbacks": [DataFlexCallback("difffilter")]},
        )


def test_grpo_trainer_refuses_an_rloo_callback_naming_the_grpo_one(make_trainer):
    with pytest.raises(TypeError, match=r"DataFlexRLOOCallback, which is for trl.RLOOTrainer.*needs DataFlexCallback"):
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"callbacks": [DataFlexRLOOCallback("difffilter")]})


def test_a_second_strategy_added_later_is_refused_naming_rloo(make_rloo):
    trainer = make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": "difffilter"})
    with pytest.raises(ValueError, match=r"this DataFlexRLOOTrainer already applies strategy 'difffilter'"):
        trainer.add_callback(DataFlexRLOOCallback("softmax"))
    with pytest.raises(ValueError, match="already applies strategy 'difffilter'"):
        trainer.add_callback(DataFlexRLOOCallback)
    with pytest.raises(
        RuntimeError,
        match=r"attach\(\) is for a stock RLOOTrainer.*DataFlexRLOOTrainer\(\.\.\., "
        r"strategy=\.\.\.\) or attach\(RLOOTrainer",
    ):
        attach(trainer, "softmax")


def test_an_unattached_rloo_callback_names_the_rloo_trainer(make_rloo):
    trainer = make_rloo(trainer_kwargs={"callbacks": [DataFlexRLOOCallback("difffilter")]})
    with pytest.raises(
        RuntimeError,
        match=r"(?s)DataFlexRLOOCallback was passed.*DataFlexRLOOTrainer\(\.\.\., "
        r"strategy=strategy\) instead of RLOOTrainer",
    ):
        trainer.train()


def test_shuffle_dataset_false_is_refused_naming_the_rloo_config(make_rloo):
    with pytest.raises(ConfigError, match=r"RLOOConfig\(shuffle_dataset=False\)"):
        make_rloo(cls=DataFlexRLOOTrainer, shuffle_dataset=False, trainer_kwargs={"strategy": "skip"})


def test_attach_builds_the_callback_class_it_is_given(make_rloo):
    class RecordingRLOOCallback(DataFlexRLOOCallback):
        """A user's callback for the RLOO host, e.g. with an extra hook."""

    trainer = make_rloo()
    callback = attach(trainer, "difffilter", callback_class=RecordingRLOOCallback)
    assert type(callback) is RecordingRLOOCallback and callback.trainer is trainer
    with pytest.raises(TypeError, match=r"DataFlexCallback works with trl.GRPOTrainer; got RLOOTrainer"):
        attach(make_rloo(), "difffilter", callback_class=DataFlexCallback)
