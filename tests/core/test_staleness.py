"""The policy version as a signal: `RolloutBatch.policy_versions`, the ``staleness`` scorer, ``staleness_discount``,
per-domain staleness metrics.
"""

import warnings

import pytest
import torch

from dataflex_callbacks import RolloutBatch, build_strategy
from dataflex_callbacks.errors import BatchError, ConfigError, ParamError
from dataflex_callbacks.host import grpo_fields
from dataflex_callbacks.metrics import DomainStalenessStats, StaleDropBiasWarning, stale_drop_bias
from dataflex_callbacks.registry import build_component
from dataflex_callbacks.testing import check_component

DISCOUNT = {
    "name": "discount",
    "reweight": {
        "scorer": {"name": "staleness", "params": {}},
        "reweighter": {"name": "staleness_discount", "params": {"gamma": 0.5}},
    },
}


def versioned(versions, trainer_version, rewards=None):
    versions = torch.tensor(versions)
    rewards = torch.ones(len(versions)) if rewards is None else torch.tensor(rewards, dtype=torch.float32)
    return RolloutBatch(
        rewards, group_ids=torch.arange(len(versions)) // 2, policy_versions=versions, trainer_version=trainer_version
    )


def test_staleness_is_trainer_version_minus_policy_versions():
    batch = versioned([3, 1, 0, 3], 3)
    assert batch.staleness.tolist() == [0, 2, 3, 0]
    assert batch.has("policy_versions") and batch.has("staleness")
    copy = batch.replace(rewards=torch.zeros(4))
    assert copy.staleness.tolist() == [0, 2, 3, 0] and copy.trainer_version == 3
    assert RolloutBatch(torch.ones(2)).staleness is None


@pytest.mark.parametrize(
    "versions, trainer_version, message",
    [
        (torch.tensor([0.0, 1.0]), 2, "integer tensor"),
        (torch.tensor([0, 1]), None, "needs trainer_version"),
        (torch.tensor([0, 3]), 2, "newer than trainer_version=2"),
        (torch.tensor([0, 1, 2]), 2, "shape"),
        (None, -1, "int from 0 to"),
        (None, True, "int from 0 to"),
        (None, 1.5, "int from 0 to"),
        (None, 2**63, "int from 0 to"),  # staleness is int64: a larger version overflows
        (torch.tensor([0, -1]), 2, "holds -1"),
    ],
)
def test_bad_versions_are_refused(versions, trainer_version, message):
    with pytest.raises(BatchError, match=message):
        RolloutBatch(torch.ones(2), policy_versions=versions, trainer_version=trainer_version)


def test_staleness_scorer_reads_the_batch_and_is_refused_where_the_host_lacks_versions():
    scorer = build_component("scorer", "staleness")
    assert scorer.score(versioned([2, 0, 1, 2], 2)).tolist() == [0.0, 2.0, 1.0, 0.0]
    with pytest.raises(BatchError, match="policy_versions"):
        scorer.score(RolloutBatch(torch.ones(2)))
    strategy = build_strategy(DISCOUNT)
    assert strategy.requires == {"policy_versions"}
    with pytest.raises(ConfigError, match="scorer 'staleness' needs policy_versions, which the TRL GRPOTrainer"):
        strategy.check_host(grpo_fields(domains=True), host="the TRL GRPOTrainer")
    strategy.check_host(grpo_fields(domains=True) | {"policy_versions"})


@pytest.mark.parametrize("gamma", [1.0, 0.5, 0.1])
def test_staleness_discount_is_gamma_to_the_staleness_at_mean_one(gamma):
    batch = versioned([4, 3, 2, 0, 4, 4], 4)
    config = {
        **DISCOUNT,
        "reweight": {**DISCOUNT["reweight"], "reweighter": {"name": "staleness_discount", "params": {"gamma": gamma}}},
    }
    decision = build_strategy(config).apply(batch, step=0)
    raw = torch.tensor([gamma**s for s in (0, 1, 2, 4, 0, 0)], dtype=torch.float64)
    expected = raw / raw.mean()
    assert torch.allclose(decision.weights.double(), expected, atol=1e-6)
    assert bool(decision.keep.all())


def test_staleness_discount_parameters_and_conformance():
    with pytest.raises(ParamError, match="gamma"):
        build_component("reweighter", "staleness_discount", gamma=0.0)
    with pytest.raises(ParamError, match="gamma"):
        build_component("reweighter", "staleness_discount", gamma=1.5)
    assert check_component(build_component("scorer", "staleness")).passed  # raises ConformanceError on a failure
    assert check_component(build_component("reweighter", "staleness_discount", gamma=0.7)).passed


def test_a_staleness_limit_is_a_threshold_selector():  # threshold_band keeps scores strictly inside (low, high)
    limit = {
        "name": "limit",
        "select": {
            "scorer": {"name": "staleness", "params": {}},
            "selector": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.5}},
        },
    }
    decision = build_strategy(limit).apply(versioned([5, 4, 3, 5], 5), step=0)
    assert decision.keep.tolist() == [True, True, False, True]


def test_domain_staleness_stats_against_hand_counts():
    stats = DomainStalenessStats(["easy", "hard"])
    stats.update(
        ["easy", "easy", "hard", "hard", "hard"],
        torch.tensor([0, 1, 2, 3, 1]),
        torch.tensor([False, False, True, False, False]),
        torch.tensor([True, False, False, False, True]),
    )
    stats.update(["hard"], torch.tensor([4]), torch.tensor([True]))
    values = stats.compute()
    assert values["staleness/mean/easy"] == pytest.approx(0.5)
    assert values["staleness/mean/hard"] == pytest.approx(2.0)  # rows 3 and 1; the stale rows are not consumed
    assert values["staleness/dropped_stale_frac/easy"] == 0.0
    assert values["staleness/dropped_stale_frac/hard"] == pytest.approx(0.5)
    assert values["staleness/dropped_strategy_frac/easy"] == pytest.approx(0.5)
    assert values["staleness/dropped_strategy_frac/hard"] == pytest.approx(0.5)
    with pytest.raises(BatchError, match="not built with"):
        stats.update(["code"], torch.tensor([0]), torch.tensor([False]))


def test_a_host_that_never_sees_stale_drops_reports_no_stale_drop_share_rather_than_zero():
    stats = DomainStalenessStats(["easy", "hard"], sees_stale_drops=False)  # verl: evicted before the trainer sees them
    stats.update(["easy", "hard"], torch.tensor([1, 2]), dropped_strategy=torch.tensor([False, True]))
    assert stats.compute() == {
        "staleness/mean/easy": 1.0,
        "staleness/dropped_strategy_frac/easy": 0.0,
        "staleness/mean/hard": 2.0,
        "staleness/dropped_strategy_frac/hard": 1.0,
    }
    with pytest.raises(BatchError, match="sees_stale_drops=False"):
        stats.update(["easy"], torch.tensor([0]), torch.tensor([False]))
    with pytest.raises(BatchError, match="needs dropped_stale"):
        DomainStalenessStats(["easy"]).update(["easy"], torch.tensor([0]))


def test_stale_drop_alarm_warns_once_for_a_domain_far_above_the_others():
    assert stale_drop_bias({"a": 0.3, "b": 0.05, "c": 0.05}) == "a"
    assert stale_drop_bias({"a": 0.3, "b": 0.2}) is None  # not far above
    assert stale_drop_bias({"a": 0.05, "b": 0.0}) is None  # too small to matter
    assert stale_drop_bias({"a": 0.9}) is None  # one domain: nothing to compare
    stats = DomainStalenessStats(["easy", "hard"])
    stats.update(["easy"] * 10 + ["hard"] * 10, torch.zeros(20), torch.tensor([False] * 10 + [True] * 4 + [False] * 6))
    with pytest.warns(StaleDropBiasWarning, match="domain 'hard' loses 40%"):
        assert stats.check_bias() == "hard"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stats.check_bias() == "hard"  # flagged again, warned once
    balanced = DomainStalenessStats(["easy", "hard"])
    balanced.update(["easy", "hard"] * 5, torch.zeros(10), torch.tensor([True, True] + [False] * 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert balanced.check_bias() is None
