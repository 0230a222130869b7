"""`dataflex.loss` with selection equals the loss of the physically reduced batch, value and gradient."""

import math

import pytest
import torch
from lightning_loss_reference import reduced_batch, reference_loss

from dataflex_callbacks import RolloutBatch, build_strategy
from dataflex_callbacks.integrations.lightning import LOSS_TYPES
from dataflex_callbacks.integrations.lightning.aggregation import finish_loss, loss_sum_and_count

N_GROUPS, GROUP, LENGTH, FEATURES = 4, 4, 6, 3

STRATEGIES = {
    "band+softmax": {
        "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.0, "high": 1.0}},
        "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 0.5}},
    },
    "topk": "topk",
    "maxvar": "maxvar",
    "entropy_top": "entropy_top",
    "band+token_weights": {
        "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.0, "high": 1.0}},
        "reweight": {"scorer": "token_prob", "reweighter": {"name": "advantage_reweight", "alpha": 0.5}},
    },
}


def make_batch(seed: int, all_same: bool = False):
    generator = torch.Generator().manual_seed(seed)
    n = N_GROUPS * GROUP
    if all_same:
        rewards = torch.arange(N_GROUPS).remainder(2).float().repeat_interleave(GROUP)
    else:
        rewards = (torch.rand(n, generator=generator) < 0.5).float()
        rewards[:GROUP] = 1.0  # one all-correct group, always dropped by the band
    lengths = torch.randint(1, LENGTH + 1, (n,), generator=generator)
    mask = torch.arange(LENGTH).unsqueeze(0) < lengths.unsqueeze(1)
    grouped = rewards.view(N_GROUPS, GROUP)
    advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
    logprobs = -torch.rand(n, LENGTH, generator=generator) * 3
    entropies = torch.rand(n, LENGTH, generator=generator)
    features = torch.randn(n, LENGTH, FEATURES, generator=generator, dtype=torch.float64)
    batch = RolloutBatch(
        rewards,
        group_ids=torch.arange(N_GROUPS).repeat_interleave(GROUP),
        completion_mask=mask,
        advantages=advantages,
        logprobs=logprobs,
        entropies=entropies,
    )
    return batch, features


def loss_and_grad(fn, features):
    theta = torch.tensor([0.3, -0.7, 1.1], dtype=torch.float64, requires_grad=True)
    per_token_loss = torch.einsum("nlf,f->nl", features, theta)
    loss = fn(per_token_loss)
    loss.backward()
    return loss.detach(), theta.grad.clone()


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_selected_loss_equals_physically_reduced_loss(name, loss_type):
    strategy = build_strategy(STRATEGIES[name])
    batch, features = make_batch(seed=len(name))
    decision = strategy.apply(batch, step=0)
    assert not bool(decision.keep.all()) or decision.token_keep is not None, "the case must drop something"
    mask = batch.valid_mask

    got, got_grad = loss_and_grad(
        lambda ptl: finish_loss(*loss_sum_and_count(ptl, decision, mask, loss_type)), features
    )

    def reference(ptl):
        loss, token_mask, weights = reduced_batch(
            ptl, mask, decision.keep, decision.weights.double(), decision.token_keep
        )
        return reference_loss(loss, token_mask, weights, loss_type)

    want, want_grad = loss_and_grad(reference, features)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_all_dropped_gives_zero_loss_that_backpropagates(loss_type):
    strategy = build_strategy("diffband")
    batch, features = make_batch(seed=0, all_same=True)
    decision = strategy.apply(batch, step=0)
    assert decision.metrics["dropped_all"] == 1.0
    theta = torch.ones(FEATURES, dtype=torch.float64, requires_grad=True)
    per_token_loss = torch.einsum("nlf,f->nl", features, theta)
    loss = finish_loss(*loss_sum_and_count(per_token_loss, decision, batch.valid_mask, loss_type))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.equal(theta.grad, torch.zeros_like(theta))


def test_non_finite_padding_does_not_leak():
    strategy = build_strategy(STRATEGIES["band+softmax"])
    batch, features = make_batch(seed=3)
    decision = strategy.apply(batch, step=0)
    theta = torch.ones(FEATURES, dtype=torch.float64, requires_grad=True)
    per_token_loss = torch.einsum("nlf,f->nl", features, theta)
    poisoned = torch.where(batch.valid_mask, per_token_loss, torch.full_like(per_token_loss, math.nan))
    loss = finish_loss(*loss_sum_and_count(poisoned, decision, batch.valid_mask, "token_mean"))
    loss.backward()
    assert math.isfinite(loss.item()) and bool(torch.isfinite(theta.grad).all())


def test_unknown_loss_type_names_the_choices():
    batch, _ = make_batch(seed=0)
    decision = build_strategy("baseline").apply(batch, step=0)
    with pytest.raises(ValueError, match="sequence_mean"):
        loss_sum_and_count(torch.zeros(batch.n, LENGTH), decision, batch.valid_mask, "grpo")
