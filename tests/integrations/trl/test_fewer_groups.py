"""``pre_select.refill: false`` in a real TRL GRPOTrainer step: only the kept prompts are generated, the fillers of
TRL's fixed shapes are masked, and the update equals that of a step trained on the kept groups alone."""

import numpy as np
import pytest
import torch

from dataflex_callbacks import build_strategy, registry
from dataflex_callbacks.components.pre_select import PreSelectFilter
from dataflex_callbacks.config import load_config
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, DataFlexRLOOTrainer
from dataflex_callbacks.integrations.trl.async_host import check_async_strategy
from dataflex_callbacks.integrations.trl.callback import KEEP_KEY
from dataflex_callbacks.integrations.trl.loss_scaling import SUPPORTED_LOSS_TYPES
from dataflex_callbacks.integrations.trl.sampling import row_key
from dataflex_callbacks.recipes.completion_accounting import logged_generated
from dataflex_callbacks.registry import register

from .loss_checks import batch_normaliser_grads, grad_of_rows_alone, loss_and_grad


class SkipOddLengths(PreSelectFilter):
    """Skips every prompt whose key has an odd length: a fixed, known share of the drawn prompts."""

    def keep_probability(self, keys, labels=None):
        return np.array([0.0 if len(str(key)) % 2 else 1.0 for key in keys])

    def observe(self, batch, step, sync=False):
        return self.metrics()


@pytest.fixture(autouse=True, scope="module")
def skip_odd_lengths_registered():
    """Registered while this module's tests run, then removed: the other tests' registry stays the built-in one."""
    register("pre_select", "skip_odd_lengths")(SkipOddLengths)
    yield
    registry._REGISTRY["pre_select"].pop("skip_odd_lengths", None)


def code_parity_reward(completions, **kwargs):
    """A reward that varies within a group: the parity of the completion's character codes."""
    return [float(sum(map(ord, completion)) % 2) for completion in completions]


NO_REFILL = {"pre_select": {"name": "skip_odd_lengths", "refill": False}}


class CountingTrainer(DataFlexGRPOTrainer):
    """Records how many prompt rows reach TRL's generation."""

    generated_rows: list

    def _generate(self, prompts):
        self.generated_rows.append(len(prompts))
        return super()._generate(prompts)


def _step_output(trainer):
    trainer.generated_rows = []
    trainer.current_gradient_accumulation_steps = 1  # set by train(); the loss reads it
    trainer.model.train()
    inputs = next(iter(trainer.get_train_dataloader()))
    return inputs, trainer._generate_and_score_completions(inputs)


@pytest.mark.parametrize("loss_type", SUPPORTED_LOSS_TYPES)
def test_a_step_of_fewer_groups_generates_only_the_kept_prompts_and_equals_a_step_of_them(make_trainer, loss_type):
    trainer = make_trainer(
        cls=CountingTrainer,
        loss_type=loss_type,
        reward_funcs=[code_parity_reward],
        per_device_train_batch_size=16,
        trainer_kwargs={"strategy": NO_REFILL},
    )
    inputs, output = _step_output(trainer)
    drawn = [row_key(row, None) for row in inputs[:: trainer.num_generations]]
    kept_prompts = [key for key, keep in zip(drawn, SkipOddLengths().keep_probability(drawn), strict=True) if keep]
    assert 0 < len(kept_prompts) < len(drawn), drawn  # the step under test skips some, not all
    kept = output[KEEP_KEY]
    assert trainer.generated_rows == [len(kept_prompts) * trainer.num_generations]  # nothing else was generated
    assert int(kept.sum()) == len(kept_prompts) * trainer.num_generations and kept.numel() == len(inputs)
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    assert logged_generated(logged) == len(kept_prompts) * trainer.num_generations

    _, grad = loss_and_grad(trainer, trainer._compute_loss, output)
    # TRL's own loss (no adapter key in the batch) on the kept groups alone: a step whose batch is those groups.
    real = kept.nonzero().flatten()
    expected = grad_of_rows_alone(trainer, output, real)  # TRL's loss on those rows alone
    assert expected.abs().sum() > 0  # the kept groups carry signal: the comparison is not 0 == 0
    assert torch.allclose(grad, expected, atol=1e-6, rtol=1e-5), (grad - expected).abs().max()


def test_refill_round_trips_and_is_refused_where_it_cannot_apply(make_trainer, make_rloo):
    config = load_config(NO_REFILL)
    assert config["pre_select"] == {"name": "skip_odd_lengths", "params": {}, "refill": False}
    assert load_config(config) == config and build_strategy(config).refills_prompts is False
    assert load_config({"pre_select": "skip_zero_variance"})["pre_select"]["refill"] is True
    with pytest.raises(ConfigError, match=r"pre_select.refill must be true or false.*got 'no'"):
        load_config({"pre_select": {"name": "skip_odd_lengths", "refill": "no"}})
    mixed = {**NO_REFILL, "mix": {"mixer": "static"}}
    with pytest.raises(ConfigError, match="refill=false in the TRL adapter does not support a mix part"):
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": mixed})
    with pytest.raises(ConfigError, match="does not support a dynamic_sampling part"):
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": {**NO_REFILL, "dynamic_sampling": True}})
    with pytest.raises(ConfigError, match="does not support the DataFlexRLOOTrainer"):
        make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": NO_REFILL})
    with pytest.raises(ConfigError, match="refill=false is not supported by TRL's AsyncGRPOTrainer"):
        check_async_strategy(build_strategy(NO_REFILL))
    with pytest.raises(ConfigError, match="refill=false.*runs in the TRL GRPOTrainer adapter only"):
        build_strategy(NO_REFILL).accept_from(None, 1, np.random.default_rng(0))  # a refilling host's loop


@pytest.mark.parametrize("loss_type", [name for name in SUPPORTED_LOSS_TYPES if name != "bnpo"])
def test_fewer_groups_loss_batch_counts_the_fillers_as_groups_without_signal(make_trainer, loss_type):
    """``fewer_groups_loss: batch``: the K generated groups' update is plain GRPO's on TRL's whole batch with the
    groups not generated as zero-advantage rows, i.e. the kept rows' own loss scaled by K_rows / R (R: TRL's rows)."""
    trainer = make_trainer(
        cls=CountingTrainer,
        loss_type=loss_type,
        reward_funcs=[code_parity_reward],
        per_device_train_batch_size=16,
        trainer_kwargs={"strategy": {**NO_REFILL, "fewer_groups_loss": "batch"}},
    )
    _, output = _step_output(trainer)
    kept = output[KEEP_KEY]
    assert 0 < int(kept.sum()) < kept.numel()  # fillers in the batch: the normalisers differ
    grad, expected = batch_normaliser_grads(trainer, output)
    assert torch.allclose(grad, expected, atol=1e-6, rtol=1e-5), (grad - expected).abs().max()
    real = kept.nonzero().flatten()
    if loss_type == "grpo":  # and, literally, TRL's own loss over every row with the fillers' advantages zeroed
        whole = {k: v for k, v in output.items() if not k.startswith("dataflex_") and k != "tool_mask"}
        whole["completion_mask"] = whole["completion_mask"].clone()
        whole["completion_mask"][~kept] = output["completion_mask"][real[0]]  # a filler is a copy of a real row
        whole["advantages"] = torch.where(kept, output["advantages"], torch.zeros_like(output["advantages"]))
        plain = loss_and_grad(trainer, trainer._compute_loss, whole)[1]
        assert torch.allclose(grad, plain, atol=1e-6, rtol=1e-5), (grad - plain).abs().max()


def test_fewer_groups_loss_batch_is_refused_with_bnpo_and_without_fewer_groups(make_trainer):
    with pytest.raises(ConfigError, match="loss_type='bnpo'"):
        make_trainer(
            cls=DataFlexGRPOTrainer,
            loss_type="bnpo",
            reward_funcs=[code_parity_reward],
            trainer_kwargs={"strategy": {**NO_REFILL, "fewer_groups_loss": "batch"}},
        )
    with pytest.raises(ConfigError, match="fills every step"):
        build_strategy({"pre_select": {"name": "skip_odd_lengths"}, "fewer_groups_loss": "batch"})
    with pytest.raises(ConfigError, match="fewer_groups_loss must be one of full, batch"):
        build_strategy({**NO_REFILL, "fewer_groups_loss": "mean"})
