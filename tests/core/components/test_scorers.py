"""Scorers against the straightforward reference, plus their declared needs and errors."""

import warnings

import core_reference as ref
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import BatchError, ConfigError, RolloutBatch, build_component, build_strategy
from dataflex_callbacks.errors import RewardScaleWarning

rows = st.lists(
    st.tuples(st.integers(0, 12), st.sampled_from([0.0, 1.0, 0.25, 0.5, 0.75, -1.0, 2.0])), min_size=0, max_size=40
)


def make_batch(n=12, length=6, seed=0, **overrides):
    gen = torch.Generator().manual_seed(seed)
    fields = dict(
        rewards=(torch.rand(n, generator=gen) > 0.5).float(),
        group_ids=torch.randint(0, 4, (n,), generator=gen) * 7 + 3,  # non-contiguous, unequal
        completion_mask=torch.rand(n, length, generator=gen) > 0.3,
        advantages=torch.randn(n, generator=gen),
        logprobs=-torch.rand(n, length, generator=gen) * 3,
        entropies=torch.rand(n, length, generator=gen),
    )
    fields.update(overrides)
    return RolloutBatch(**fields)


@settings(max_examples=60, deadline=None)
@given(rows, st.sampled_from([0.5, 0.0, 0.9]))
def test_group_scorers_match_reference(data, threshold):
    gids = torch.tensor([g * 3 + 1 for g, _ in data], dtype=torch.long)
    rewards = torch.tensor([r for _, r in data], dtype=torch.float32)
    batch = RolloutBatch(rewards, group_ids=gids)
    solve = build_component("scorer", "group_solve_rate", threshold=threshold).score(batch)
    torch.testing.assert_close(solve, ref.group_solve_rate(rewards, gids, threshold))
    variance = build_component("scorer", "group_reward_variance").score(batch)
    torch.testing.assert_close(variance, ref.group_reward_variance(rewards, gids), atol=1e-6, rtol=1e-5)
    # permuting rows permutes the scores
    perm = torch.randperm(len(data))
    permuted = RolloutBatch(rewards[perm], group_ids=gids[perm])
    torch.testing.assert_close(
        build_component("scorer", "group_solve_rate", threshold=threshold).score(permuted), solve[perm]
    )
    torch.testing.assert_close(
        build_component("scorer", "group_reward_variance").score(permuted), variance[perm], atol=1e-6, rtol=1e-5
    )


@pytest.mark.parametrize("reduce", ["mean", "sum", "max"])
@pytest.mark.parametrize("token_level", [False, True])
def test_advantage_magnitude_matches_reference(reduce, token_level):
    batch = make_batch()
    if token_level:
        batch = batch.replace(advantages=torch.randn(batch.n, 6))
    score = build_component("scorer", "advantage_magnitude", reduce=reduce).score(batch)
    torch.testing.assert_close(score, ref.advantage_magnitude(batch.advantages, batch.valid_mask, reduce))


def test_advantage_magnitude_row_without_valid_tokens_is_zero():
    batch = RolloutBatch(
        torch.zeros(2), advantages=torch.ones(2, 3), completion_mask=torch.tensor([[1, 1, 0], [0, 0, 0]])
    )
    for reduce in ("mean", "sum", "max"):
        score = build_component("scorer", "advantage_magnitude", reduce=reduce).score(batch)
        assert float(score[1]) == 0.0 and torch.isfinite(score).all()


def test_simple_scorers():
    batch = make_batch()
    torch.testing.assert_close(build_component("scorer", "reward").score(batch), batch.rewards)
    torch.testing.assert_close(build_component("scorer", "reward_difficulty").score(batch), batch.rewards)
    torch.testing.assert_close(build_component("scorer", "token_prob").score(batch), batch.logprobs.exp())
    torch.testing.assert_close(build_component("scorer", "token_entropy").score(batch), batch.entropies)
    lengths = batch.completion_mask.sum(1).float()
    torch.testing.assert_close(build_component("scorer", "response_length").score(batch), lengths)
    torch.testing.assert_close(
        build_component("scorer", "reward_efficiency").score(batch), batch.rewards / lengths.clamp_min(1)
    )


@pytest.mark.parametrize(
    "name, granularity, needs_groups, requires",
    [
        ("reward", "response", False, {"rewards"}),
        ("group_solve_rate", "response", True, {"rewards", "group_ids"}),
        ("group_reward_variance", "response", True, {"rewards", "group_ids"}),
        ("advantage_magnitude", "response", False, {"advantages"}),
        ("token_prob", "token", False, {"logprobs"}),
        ("token_entropy", "token", False, {"entropies"}),
        ("response_length", "response", False, {"completion_mask"}),
        ("reward_efficiency", "response", False, {"rewards", "completion_mask"}),
    ],
)
def test_declarations(name, granularity, needs_groups, requires):
    scorer = build_component("scorer", name)
    assert (
        scorer.granularity == granularity and scorer.needs_groups == needs_groups and set(scorer.requires) == requires
    )


@pytest.mark.parametrize(
    "name, field",
    [
        ("group_solve_rate", "group_ids"),
        ("group_reward_variance", "group_ids"),
        ("advantage_magnitude", "advantages"),
        ("token_prob", "logprobs"),
        ("token_entropy", "entropies"),
        ("response_length", "completion_mask"),
    ],
)
def test_missing_field_is_named(name, field):
    with pytest.raises(BatchError, match=f"RolloutBatch.{field}"):
        build_component("scorer", name).score(RolloutBatch(torch.zeros(3)))


def test_bf16_inputs():
    batch = make_batch(
        rewards=torch.tensor([1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1], dtype=torch.bfloat16),
        advantages=torch.randn(12).to(torch.bfloat16),
        logprobs=(-torch.rand(12, 6)).to(torch.bfloat16),
    )
    for name in (
        "reward",
        "group_solve_rate",
        "group_reward_variance",
        "advantage_magnitude",
        "token_prob",
        "response_length",
        "reward_efficiency",
    ):
        score = build_component("scorer", name).score(batch)
        assert score.dtype == torch.float32 and torch.isfinite(score).all()
    torch.testing.assert_close(
        build_component("scorer", "group_solve_rate").score(batch),
        ref.group_solve_rate(batch.rewards.float(), batch.group_ids),
    )


def test_empty_batch_scores():
    batch = RolloutBatch(
        torch.zeros(0),
        group_ids=torch.zeros(0, dtype=torch.long),
        advantages=torch.zeros(0),
        completion_mask=torch.zeros(0, 4, dtype=torch.bool),
    )
    for name in ("reward", "group_solve_rate", "group_reward_variance", "advantage_magnitude", "response_length"):
        assert build_component("scorer", name).score(batch).shape == (0,)


# ---------------------------------------------------------------- DataFlex-RL names, non-binary rewards, spreads


def test_reference_parameter_names_are_aliases():
    batch = make_batch(rewards=torch.tensor([0.2, 0.9, 0.4, 0.6] * 3))
    by_alias = build_component("scorer", "group_solve_rate", success_threshold=0.3).score(batch)
    torch.testing.assert_close(by_alias, build_component("scorer", "group_solve_rate", threshold=0.3).score(batch))
    for agg in ("mean", "sum", "max"):
        torch.testing.assert_close(
            build_component("scorer", "advantage_magnitude", agg=agg).score(batch),
            build_component("scorer", "advantage_magnitude", reduce=agg).score(batch),
        )


@pytest.mark.parametrize(
    "name, params",
    [
        ("group_solve_rate", {"threshold": 0.5, "success_threshold": 0.5}),
        ("advantage_magnitude", {"reduce": "mean", "agg": "mean"}),
    ],
)
def test_name_and_alias_together_is_an_error(name, params):
    with pytest.raises(ConfigError, match="alias"):
        build_component("scorer", name, **params)


@pytest.mark.parametrize(
    "name, params, fragment",
    [
        ("group_solve_rate", {"threshold": "high"}, "'threshold'"),
        ("group_solve_rate", {"success_threshold": [0.5]}, "'success_threshold'"),
        ("group_solve_rate", {"threshold": float("nan")}, "'threshold'"),
        ("advantage_magnitude", {"reduce": "median"}, "'reduce'"),
        ("advantage_magnitude", {"agg": ["mean"]}, "'agg'"),
    ],
)
def test_wrong_parameter_types_name_the_parameter(name, params, fragment):
    with pytest.raises(ConfigError, match=fragment + " must be"):  # a value check, not "unknown parameter"
        build_component("scorer", name, **params)


def test_solve_rate_on_non_binary_rewards_warns_once_naming_the_fixes():
    scorer = build_component("scorer", "group_solve_rate")
    batch = make_batch(rewards=torch.linspace(0.1, 0.4, 12))  # a length reward, say: nothing is "solved"
    with pytest.warns(RewardScaleWarning, match="not all 0 or 1") as record:
        scorer.score(batch)
    text = str(record[0].message)
    for fix in ("success_threshold=", "a selection reward", "group_reward_variance", "threshold_band"):
        assert fix in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scorer.score(batch)  # once
        build_component("scorer", "group_solve_rate").score(make_batch())  # 0/1 rewards: silent
        build_component("scorer", "group_solve_rate", success_threshold=0.25).score(batch)  # the user chose


def test_group_reward_variance_is_exactly_zero_for_equal_continuous_rewards():
    values = [0.1, 0.7, 1.0 / 3.0, 2.9, 1e-7]
    rewards = torch.tensor([v for v in values for _ in range(8)], dtype=torch.float32)
    gids = torch.arange(40) // 8
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        score = build_component("scorer", "group_reward_variance").score(
            RolloutBatch(rewards.to(dtype), group_ids=gids)
        )
        assert (score == 0).all(), dtype


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 9), st.booleans(), st.floats(-5, 5, allow_nan=False, width=32)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 2**16),
    st.sampled_from(["yaml", "dict"]),
)
def test_spread_filter_keeps_exactly_the_groups_whose_rewards_differ(groups, seed, form):
    gen = torch.Generator().manual_seed(seed)
    gids, rewards, differs = [], [], []
    for g, (size, equal, base) in enumerate(groups):
        values = [base] * size if equal else (base + torch.rand(size, generator=gen)).tolist()
        gids += [g] * size
        rewards += values
        differs += [len(set(torch.tensor(values, dtype=torch.float32).tolist())) > 1] * size
    perm = torch.randperm(len(gids), generator=gen)
    batch = RolloutBatch(torch.tensor(rewards, dtype=torch.float32)[perm], group_ids=torch.tensor(gids)[perm])
    select = {
        "scorer": "group_reward_variance",
        "selector": {"name": "threshold_band", "params": {"low": 0.0, "high": float("inf")}},
    }
    if form == "yaml":
        select = yaml.safe_load(
            "scorer: group_reward_variance\nselector: {name: threshold_band, params: {low: 0.0, high: .inf}}"
        )
    keep = build_strategy({"select": select}).apply(batch, 0).keep
    assert keep.tolist() == torch.tensor(differs)[perm].tolist()


def test_advantage_magnitude_on_token_advantages_is_the_plain_expression_bit_for_bit():
    gen = torch.Generator().manual_seed(3)
    mask = torch.rand(300, 700, generator=gen) > 0.4  # bool mask, verl's form; > one CPU block of rows
    advantages = torch.randn(300, 700, generator=gen)
    for reduce in ("mean", "sum", "max"):
        got = build_component("scorer", "advantage_magnitude", reduce=reduce).score(
            RolloutBatch(torch.zeros(300), advantages=advantages, completion_mask=mask)
        )
        assert torch.equal(got, ref.dfrl_advantage_magnitude(advantages, mask, reduce)), reduce
