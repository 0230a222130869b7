"""A DataFlex-RL (reference-form) block decides as the reference plugin does: same keep sets, same weights.

The reference side is `core_reference`'s ``dfrl_*`` functions and per-group loops, written from the
reference's behaviour (its per-group ``np.unique`` loops, ``torch.topk`` ties, half-to-even counts,
PER's epsilon). Batches: groups of 5 and 8, unequal and shuffled groups, 0/1 and continuous rewards,
many ties (equal rewards, equal lengths, GRPO advantages equal within a group).
"""

import core_reference as ref
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import RolloutBatch, build_strategy

L = 12


def make_batch(sizes, seed, continuous, shuffle):
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    gids = torch.repeat_interleave(torch.arange(len(sizes)) * 7 + 3, torch.tensor(sizes))
    if continuous:  # a few levels, so equal rewards (and ties) stay common
        rewards = torch.tensor([0.0, 0.1, 0.25, 0.7, 1.0, 0.35])[torch.randint(0, 6, (n,), generator=gen)]
    else:
        rewards = (torch.rand(n, generator=gen) > 0.5).float()
    lengths = torch.randint(1, 5, (n,), generator=gen) * 3  # few distinct lengths: ties in L and r / L
    mask = torch.arange(L) < lengths.unsqueeze(1)
    # GRPO advantage, verl's (N, L) form: the group-normalised reward on every valid token
    mean = torch.zeros(n)
    for g in gids.unique():
        rows = gids == g
        mean[rows] = rewards[rows].mean()
    advantages = (rewards - mean).unsqueeze(1) * mask
    logprobs = -torch.rand(n, L, generator=gen) * 2
    if shuffle:
        perm = torch.randperm(n, generator=gen)
        rewards, gids, mask, advantages, logprobs = (
            rewards[perm],
            gids[perm],
            mask[perm],
            advantages[perm],
            logprobs[perm],
        )
    return RolloutBatch(rewards, group_ids=gids, completion_mask=mask, advantages=advantages, logprobs=logprobs)


def block(mechanism, scorer, actuator, **actuator_params):
    scorer_name, scorer_params = scorer if isinstance(scorer, tuple) else (scorer, {})
    return {
        "mechanism": mechanism,
        "scorer": {"name": scorer_name, "params": scorer_params},
        "actuator": {"name": actuator, "params": actuator_params},
    }


def reference_keep(config, batch):
    """What the reference plugin keeps for a select block."""
    scorer, params = config["scorer"]["name"], config["scorer"]["params"]
    actuator, a = config["actuator"]["name"], config["actuator"]["params"]
    mask = batch.completion_mask
    if scorer == "group_solve_rate":
        scores = ref.dfrl_group_solve_rate(batch.rewards, batch.group_ids, params.get("success_threshold", 0.5))
    elif scorer == "advantage_magnitude":
        scores = ref.dfrl_advantage_magnitude(batch.advantages, mask, params.get("agg", "mean"))
    else:
        scores = batch.rewards
    if actuator == "threshold_band":
        return ref.dfrl_threshold_band(scores, a["low"], a["high"])
    if actuator == "topk_fraction":
        return ref.topk_fraction(scores, a["fraction"], a.get("largest", True))
    if actuator == "gfpo":
        return ref.dfrl_gfpo(scores, mask, batch.group_ids, a["k"], a["metric"])
    return ref.max_variance_loop(scores, batch.group_ids, a["keep_fraction"])


SELECT_BLOCKS = [
    block("select", ("group_solve_rate", {"success_threshold": 0.5}), "threshold_band", low=0.2, high=0.8),
    block("select", "group_solve_rate", "threshold_band", low=0.0, high=1.0),
    block("select", ("advantage_magnitude", {"agg": "mean"}), "topk_fraction", fraction=0.5),
    block("select", ("advantage_magnitude", {"agg": "sum"}), "topk_fraction", fraction=0.3, largest=False),
    block("select", ("advantage_magnitude", {"agg": "max"}), "topk_fraction", fraction=0.5),
    block("select", "reward_difficulty", "gfpo", k=3, metric="efficiency"),
    block("select", "reward_difficulty", "gfpo", k=2, metric="short"),
    block("select", "reward_difficulty", "max_variance", keep_fraction=0.5),
    block("select", "reward_difficulty", "max_variance", keep_fraction=0.75),
]
BATCHES = [
    ([5] * 6, False, False),
    ([8] * 4, False, True),
    ([5] * 6, True, True),
    ([8] * 4, True, False),
    ([1, 3, 5, 8, 2, 7, 4], False, True),
    ([1, 3, 5, 8, 2, 7, 4], True, True),
]


@pytest.mark.parametrize("config", SELECT_BLOCKS, ids=lambda c: f"{c['scorer']['name']}-{c['actuator']['name']}")
@pytest.mark.parametrize("sizes, continuous, shuffle", BATCHES)
@pytest.mark.parametrize("seed", range(4))
def test_select_blocks_keep_the_references_rows(config, sizes, continuous, shuffle, seed):
    batch = make_batch(sizes, seed, continuous, shuffle)
    keep = build_strategy(config).apply(batch, 0).keep
    assert torch.equal(keep, reference_keep(config, batch))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SELECT_BLOCKS),
    st.lists(st.sampled_from([1, 2, 3, 5, 8, 9]), min_size=1, max_size=10),
    st.integers(0, 2**16),
    st.booleans(),
    st.booleans(),
)
def test_select_blocks_on_random_group_layouts(config, sizes, seed, continuous, shuffle):
    batch = make_batch(sizes, seed, continuous, shuffle)
    assert torch.equal(build_strategy(config).apply(batch, 0).keep, reference_keep(config, batch))


REWEIGHT_BLOCKS = [
    (
        block("reweight", ("advantage_magnitude", {"agg": "mean"}), "softmax", temperature=1.0),
        lambda b: ref.dfrl_softmax(ref.dfrl_advantage_magnitude(b.advantages, b.completion_mask), 1.0),
    ),
    (
        block("reweight", ("advantage_magnitude", {"agg": "mean"}), "softmax", temperature=0.1),
        lambda b: ref.dfrl_softmax(ref.dfrl_advantage_magnitude(b.advantages, b.completion_mask), 0.1),
    ),
    (
        block("reweight", ("advantage_magnitude", {"agg": "mean"}), "per_advantage", alpha=0.5),
        lambda b: ref.dfrl_per_advantage(ref.dfrl_advantage_magnitude(b.advantages, b.completion_mask), 0.5),
    ),
    (
        block("reweight", "reward_difficulty", "difficulty_band", low_q=0.25, high_q=0.75, focus_weight=2.0),
        lambda b: ref.dfrl_difficulty_band(b.rewards, 0.25, 0.75, 2.0),
    ),
]


@pytest.mark.parametrize("index", range(len(REWEIGHT_BLOCKS)))
@pytest.mark.parametrize("sizes, continuous, shuffle", BATCHES)
@pytest.mark.parametrize("seed", range(3))
def test_reweight_blocks_give_the_references_weights(index, sizes, continuous, shuffle, seed):
    config, reference = REWEIGHT_BLOCKS[index]
    batch = make_batch(sizes, seed, continuous, shuffle)
    weights = build_strategy(config).apply(batch, 0).weights
    torch.testing.assert_close(weights, reference(batch), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("sizes, continuous, shuffle", BATCHES)
def test_advantage_reweight_block_gives_the_references_token_weights(sizes, continuous, shuffle):
    batch = make_batch(sizes, 1, continuous, shuffle)
    config = block("reweight", "token_prob", "advantage_reweight", alpha=0.5)
    weights = build_strategy(config).apply(batch, 0).weights
    expected = ref.dfrl_advantage_reweight(batch.logprobs.exp(), batch.completion_mask, 0.5)
    valid = batch.valid_mask
    torch.testing.assert_close(weights[valid], expected[valid], rtol=2e-5, atol=1e-6)
    assert (weights[~valid] == 0).all()


def test_reference_semantics_by_hand():
    # max_variance: f=0.5, G=5 keeps round(2.5) = 2 (half to even), one low and one high
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    batch = RolloutBatch(rewards, group_ids=torch.zeros(5, dtype=torch.long), completion_mask=torch.ones(5, 3))
    keep = build_strategy(block("select", "reward_difficulty", "max_variance", keep_fraction=0.5)).apply(batch, 0).keep
    assert keep.tolist() == [False, True, False, True, False]  # a=1: the first 0 and the last 1 in sorted order
    # per_advantage: |A| = 0 keeps a small weight, (1e-8)^0.5 against 1^0.5 before normalising
    w = (
        build_strategy(block("reweight", "advantage_magnitude", "per_advantage", alpha=0.5))
        .apply(RolloutBatch(torch.zeros(2), advantages=torch.tensor([0.0, 1.0])), 0)
        .weights
    )
    assert w[0] > 0 and float(w[0] / w[1]) == pytest.approx(1e-4, rel=1e-3)
    # gfpo efficiency reads the configured scorer: ranking by the solve rate per token, not the reward
    mask = torch.arange(4) < torch.tensor([[1], [4], [2], [3]])
    batch = RolloutBatch(
        torch.tensor([0.0, 1.0, 1.0, 0.0]),
        group_ids=torch.zeros(4, dtype=torch.long),
        completion_mask=mask,
        advantages=torch.tensor([3.0, 0.1, 0.2, 2.0]),
    )
    keep = build_strategy(block("select", "advantage_magnitude", "gfpo", k=2, metric="efficiency")).apply(batch, 0).keep
    assert keep.tolist() == [True, False, False, True]  # 3/1 and 2/3 beat 0.2/2 and 0.1/4
