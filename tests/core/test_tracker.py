"""DomainTracker: windowed statistics and reward slope vs a plain-list / numpy reference; state."""

import math

import numpy as np
import pytest
import torch

import core_reference as ref
from dataflex_callbacks import BatchError, ConfigError, DomainTracker, RolloutBatch

DOMAINS = ["math", "code", "logic"]


def random_batch(gen, n=24, group=4, with_nan=False):
    rewards = (torch.rand(n, generator=gen) > torch.rand(1, generator=gen)).float()
    if with_nan:
        rewards[torch.rand(n, generator=gen) < 0.1] = float("nan")
    gids = torch.arange(n) // group
    # one domain per group (a group is one prompt); some domains may be absent in a step
    group_domain = [DOMAINS[int(i)] for i in torch.randint(0, 2 + int(torch.rand(1, generator=gen) > 0.5), (n // group,), generator=gen)]
    domains = [group_domain[i // group] for i in range(n)]
    advantages = torch.randn(n, generator=gen)
    return RolloutBatch(rewards, group_ids=gids, advantages=advantages, domains=domains)


@pytest.mark.parametrize("window", [1, 3, 7])
@pytest.mark.parametrize("with_nan", [False, True])
def test_window_means_and_slope_match_reference(window, with_nan):
    gen = torch.Generator().manual_seed(window)
    tracker, reference = DomainTracker(DOMAINS, window=window), ref.ReferenceTracker(DOMAINS, window)
    for step in range(12):
        batch = random_batch(gen, with_nan=with_nan)
        tracker.update(batch, step=step * 2)
        reference.update(batch.rewards.tolist(), list(batch.domains), step * 2, batch.advantages.tolist(), batch.group_ids)
        np.testing.assert_allclose(tracker.mean_reward().numpy(), reference.mean("reward"), atol=1e-12)
        np.testing.assert_allclose(tracker.mean_abs_advantage().numpy(), reference.mean("abs_advantage"), atol=1e-12)
        np.testing.assert_allclose(tracker.mean_group_variance().numpy(), reference.mean("group_variance"), atol=1e-12)
        np.testing.assert_allclose(tracker.reward_slope().numpy(), reference.slope(), atol=1e-9)
        assert tracker.total_count.tolist() == [reference.total[d] for d in DOMAINS]


def test_unobserved_domain_is_nan_and_slope_zero():
    tracker = DomainTracker(DOMAINS)
    tracker.update(RolloutBatch(torch.tensor([1.0, 0.0]), domains=["math", "math"]), step=0)
    assert tracker.mean_reward()[0] == 0.5 and math.isnan(tracker.mean_reward()[1])
    assert tracker.reward_slope().tolist() == [0.0, 0.0, 0.0]


def test_slope_of_linear_series_is_exact():
    tracker = DomainTracker(["a"], window=5)
    for step in range(10):
        tracker.update(RolloutBatch(torch.tensor([0.1 * step]), domains=["a"]), step=step)
    assert float(tracker.reward_slope()[0]) == pytest.approx(0.1)


def test_state_dict_round_trip_is_exact():
    gen = torch.Generator().manual_seed(0)
    tracker = DomainTracker(DOMAINS, window=4)
    for step in range(7):
        tracker.update(random_batch(gen), step=step)
    restored = DomainTracker(DOMAINS, window=4)
    restored.load_state_dict(tracker.state_dict())
    assert restored.as_dict() == tracker.as_dict() or all(
        np.allclose(list(restored.as_dict()[k].values()), list(tracker.as_dict()[k].values()), equal_nan=True, rtol=0, atol=0)
        for k in tracker.as_dict())
    batch = random_batch(gen)
    tracker.update(batch, step=7)
    restored.update(batch, step=7)
    for name in ("reward", "abs_advantage", "group_variance", "count", "step"):
        assert torch.equal(tracker.history[name], restored.history[name])
    assert torch.equal(tracker.reward_slope(), restored.reward_slope())


def test_load_state_with_other_config_raises():
    state = DomainTracker(DOMAINS, window=4).state_dict()
    with pytest.raises(ConfigError, match="resume with the same config"):
        DomainTracker(DOMAINS, window=5).load_state_dict(state)
    with pytest.raises(ConfigError):
        DomainTracker(["math", "code"], window=4).load_state_dict(state)


def test_errors():
    tracker = DomainTracker(DOMAINS)
    with pytest.raises(BatchError, match="domains"):
        tracker.update(RolloutBatch(torch.zeros(2)))
    with pytest.raises(BatchError, match="'poetry'"):
        tracker.update(RolloutBatch(torch.zeros(1), domains=["poetry"]))
    with pytest.raises(ConfigError):
        DomainTracker([])
    with pytest.raises(ConfigError):
        DomainTracker(["a", "a"])
    with pytest.raises(ValueError, match="window"):
        DomainTracker(["a"], window=0)


def test_empty_batch_changes_nothing_but_the_update_count():
    tracker = DomainTracker(DOMAINS)
    tracker.update(RolloutBatch(torch.zeros(0), domains=[]), step=0)
    assert tracker.filled.tolist() == [0, 0, 0] and tracker.updates == 1


def test_bf16_rewards():
    tracker = DomainTracker(["a"])
    tracker.update(RolloutBatch(torch.tensor([1.0, 0.0], dtype=torch.bfloat16), advantages=torch.tensor([0.5, -0.5], dtype=torch.bfloat16), domains=["a", "a"]))
    assert float(tracker.mean_reward()[0]) == 0.5 and float(tracker.mean_abs_advantage()[0]) == 0.5
