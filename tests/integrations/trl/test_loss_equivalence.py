"""Selection equals physical removal, and weights equal a weighted per-token loss, for every TRL loss_type.

References are TRL's own ``GRPOTrainer._compute_loss``: on the physically reduced batch for
selection, and summed row by row for weights (each TRL loss is a sum of per-row terms over a
normaliser that does not depend on the model, so the weighted gradient is the weighted sum of
the rows' gradients).
"""

import pytest
import torch
from loss_checks import loss_and_grad, masked_inputs, policy_weighted_step
from trl import GRPOTrainer

from dataflex_callbacks import build_strategy
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.loss_scaling import ROW_COUNT_LOSSES

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"]
BETAS = [0.0, 0.04]
TOLERANCE = 1e-5
ROWS, PROMPT_LEN, COMPLETION_LEN = 6, 4, 5
LENGTHS = [5, 3, 4, 1, 5, 2]


@pytest.fixture(scope="module")
def bench(make_trainer):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        trainer_kwargs={"strategy": "baseline"},
        max_completion_length=COMPLETION_LEN,
        per_device_train_batch_size=6,
        num_generations=2,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (ROWS, PROMPT_LEN), generator=gen)
    completion_ids = torch.randint(3, vocab, (ROWS, COMPLETION_LEN), generator=gen)
    completion_mask = (torch.arange(COMPLETION_LEN).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).long()
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([torch.ones_like(prompt_ids), completion_mask], 1),
            COMPLETION_LEN,
        )
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(ROWS, generator=gen),
        "old_per_token_logps": logps + 0.3 * torch.randn(ROWS, COMPLETION_LEN, generator=gen),
        "ref_per_token_logps": logps + 0.2 * torch.randn(ROWS, COMPLETION_LEN, generator=gen),
        "num_items_in_batch": completion_mask.sum(),
    }
    return trainer, inputs


def configure(trainer, loss_type, beta):
    trainer.loss_type = loss_type
    trainer.beta = beta
    trainer.importance_sampling_level = "sequence" if loss_type == "luspo" else "token"


def stock_loss(trainer):
    return lambda model, inputs: GRPOTrainer._compute_loss(trainer, model, inputs)


def reduced_inputs(inputs, keep):
    reduced = {k: v[keep] for k, v in inputs.items() if v.dim() > 0}
    reduced["num_items_in_batch"] = inputs["completion_mask"][keep].sum()
    return reduced


def max_deviation(trainer, inputs, loss_type, beta, keep):
    """Absolute loss and max gradient deviation between masking ``keep`` and removing the other rows."""
    configure(trainer, loss_type, beta)
    loss, grad = loss_and_grad(trainer, trainer._compute_loss, masked_inputs(trainer, inputs, keep))
    ref_loss, ref_grad = loss_and_grad(trainer, stock_loss(trainer), reduced_inputs(inputs, keep))
    return (loss - ref_loss).abs().item(), (grad - ref_grad).abs().max().item()


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_selection_equals_physical_removal(bench, loss_type, beta):
    trainer, inputs = bench
    for keep in ([True, False, True, True, False, True], [False, True, False, False, True, False]):
        loss_dev, grad_dev = max_deviation(trainer, inputs, loss_type, beta, torch.tensor(keep))
        assert loss_dev <= TOLERANCE and grad_dev <= TOLERANCE, (loss_type, beta, keep, loss_dev, grad_dev)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_dropping_everything_gives_zero_loss_and_gradient(bench, loss_type):
    trainer, inputs = bench
    configure(trainer, loss_type, 0.04)
    loss, grad = loss_and_grad(
        trainer, trainer._compute_loss, masked_inputs(trainer, inputs, torch.zeros(ROWS, dtype=torch.bool))
    )
    assert loss.item() == 0.0 and torch.isfinite(grad).all() and grad.abs().max().item() == 0.0


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_response_weights_scale_every_per_token_term(bench, loss_type, beta):
    """Gradient == sum_i w_i * (gradient of row i alone), KL term included."""
    trainer, inputs = bench
    configure(trainer, loss_type, beta)
    weights = torch.tensor([0.5, 2.0, 1.0, 0.25, 1.5, 0.75])
    keep = torch.ones(ROWS, dtype=torch.bool)
    _, grad = loss_and_grad(trainer, trainer._compute_loss, masked_inputs(trainer, inputs, keep, weights))
    mask = inputs["completion_mask"]
    reference = torch.zeros_like(grad)
    for row in range(ROWS):
        only_row = dict(inputs, tool_mask=(torch.arange(ROWS) == row).long().unsqueeze(1).expand_as(mask))
        _, row_grad = loss_and_grad(trainer, stock_loss(trainer), only_row)
        # bnpo divides by the unmasked token count, which the row-alone run shrank.
        correction = mask[row].sum() / mask.sum() if loss_type == "bnpo" else 1.0
        reference += weights[row] * correction * row_grad
    assert (grad - reference).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo"])
def test_policy_token_weights_go_through_the_logprob_wrapper(bench, loss_type):
    """`ar` weights come from the current policy inside the loss; with token-level ratios the clipped surrogate
    is positively homogeneous, so they equal stock TRL run with (B, T) advantages multiplied by the weights."""
    trainer, inputs = bench
    configure(trainer, loss_type, 0.0)
    strategy = build_strategy("ar")
    previous = trainer.dataflex.strategy
    trainer.dataflex.strategy = strategy
    try:
        decision, grad, token_weights = policy_weighted_step(trainer, strategy, inputs, COMPLETION_LEN)
        assert decision.deferred
        assert token_weights.shape == (ROWS, COMPLETION_LEN)
        weighted = dict(inputs, advantages=inputs["advantages"].unsqueeze(1) * token_weights)
        _, reference = loss_and_grad(trainer, stock_loss(trainer), weighted)
        assert (grad - reference).abs().max().item() <= TOLERANCE
    finally:
        trainer.dataflex.strategy = previous


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "luspo", "sapo", "dapo", "bnpo"])
def test_logged_loss_with_an_entropy_bonus_is_the_documented_number(bench, loss_type):
    """docs/trl.md: with an entropy bonus, row-count losses log and train on (B/K)(masked policy loss - c*H), which is
    the reduced batch's policy loss - (B/K)*c*H; the other loss types give the reduced batch's loss exactly."""
    trainer, inputs = bench
    keep = torch.tensor([True, False, True, True, False, True])
    coef = 0.05
    configure(trainer, loss_type, 0.0)
    reduced = reduced_inputs(inputs, keep)
    try:
        policy, _ = loss_and_grad(trainer, stock_loss(trainer), reduced)
        trainer.entropy_coef, trainer._entropy_bonus_enabled = coef, True
        with_bonus, _ = loss_and_grad(trainer, stock_loss(trainer), reduced)
        logged, _ = loss_and_grad(trainer, trainer._compute_loss, masked_inputs(trainer, inputs, keep))
    finally:
        trainer.entropy_coef, trainer._entropy_bonus_enabled = 0.0, False
    entropy = (policy - with_bonus) / coef  # mean entropy over the kept tokens
    assert entropy.item() > 0
    scale = len(keep) / int(keep.sum()) if loss_type in ROW_COUNT_LOSSES else 1.0
    assert logged.item() == pytest.approx((policy - scale * coef * entropy).item(), abs=TOLERANCE)
    if loss_type not in ROW_COUNT_LOSSES:
        assert logged.item() == pytest.approx(with_bonus.item(), abs=TOLERANCE)
