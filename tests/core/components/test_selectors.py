"""Selectors: exact counts, whole-group decisions, brute-force optimality, ties, edge cases."""

import core_reference as ref
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import BatchError, RolloutBatch, build_component
from dataflex_callbacks.components.selectors import max_variance_subset, top_tokens

REWARD_VALUES = [0.0, 1.0, 0.5, 0.25, -1.0, 3.0]


@st.composite
def grouped(draw, max_groups=6, max_size=8, values=st.sampled_from(REWARD_VALUES)):
    """Rows with unequal, shuffled (non-contiguous) groups of 1..max_size."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    gids, rewards = [], []
    for g, size in enumerate(sizes):
        gids += [g * 5 + 2] * size
        rewards += [draw(values) for _ in range(size)]
    perm = draw(st.permutations(range(len(gids))))
    return torch.tensor([gids[i] for i in perm]), torch.tensor([rewards[i] for i in perm], dtype=torch.float32)


def select(name, scores, batch, **params):
    return build_component("selector", name, **params).select(scores, batch)


# ---------------------------------------------------------------- threshold_band


def test_threshold_band_open_interval():
    scores = torch.tensor([0.0, 0.2, 0.21, 0.5, 0.79, 0.8, 1.0])
    keep = select("threshold_band", scores, RolloutBatch(scores), low=0.2, high=0.8)
    assert keep.tolist() == [False, False, True, True, True, False, False]
    torch.testing.assert_close(keep, ref.threshold_band(scores, 0.2, 0.8))


@settings(max_examples=60, deadline=None)
@given(
    grouped(),
    st.sampled_from([(0.0, 1.0), (0.2, 0.8), (0.1, 0.5)]),
    st.sampled_from(["group_solve_rate", "group_reward_variance"]),
)
def test_threshold_band_on_group_scores_keeps_or_drops_whole_groups(data, band, scorer):
    gids, rewards = data
    batch = RolloutBatch(rewards, group_ids=gids)
    keep = select("threshold_band", build_component("scorer", scorer).score(batch), batch, low=band[0], high=band[1])
    for members in ref.groups_of(gids).values():
        assert len({bool(keep[i]) for i in members}) == 1


# ---------------------------------------------------------------- topk_fraction


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, 2.0, 0.5, -3.0]), max_size=30),
    st.sampled_from([0.01, 0.25, 0.5, 0.7, 1.0]),
    st.booleans(),
)
def test_topk_keeps_rounded_count_and_matches_reference(values, fraction, largest):
    scores = torch.tensor(values, dtype=torch.float32)
    keep = select("topk_fraction", scores, RolloutBatch(scores), fraction=fraction, largest=largest)
    n = len(values)
    assert int(keep.sum()) == (ref.round_count(fraction, n) if n else 0)  # Python round: half to even
    if keep.any() and (~keep).any():  # a true top-k: no dropped score beats a kept one
        kept, dropped = scores[keep], scores[~keep]
        assert (kept.min() >= dropped.max()) if largest else (kept.max() <= dropped.min())
    assert torch.equal(keep, ref.topk_fraction(scores, fraction, largest))  # ties: as torch.topk on CPU (DataFlex-RL)


def test_topk_rounds_half_to_even():
    scores = torch.arange(5, dtype=torch.float32)  # 0.5 * 5 = 2.5 -> 2 kept (DataFlex-RL), not 3
    assert select("topk_fraction", scores, RolloutBatch(scores), fraction=0.5).tolist() == [
        False,
        False,
        False,
        True,
        True,
    ]


def test_topk_permutation_equivariant_without_ties():
    scores = torch.randperm(50).float()
    perm = torch.randperm(50)
    keep = select("topk_fraction", scores, RolloutBatch(scores), fraction=0.3)
    assert torch.equal(select("topk_fraction", scores[perm], RolloutBatch(scores[perm]), fraction=0.3), keep[perm])


# ---------------------------------------------------------------- gfpo


@settings(max_examples=60, deadline=None)
@given(grouped(), st.integers(1, 5), st.sampled_from(["short", "efficiency", "score"]), st.integers(0, 2**16))
def test_gfpo_keeps_min_k_group_size_per_group(data, k, metric, seed):
    gids, rewards = data
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(len(gids), 5, generator=gen) > 0.4
    batch = RolloutBatch(rewards, group_ids=gids, completion_mask=mask)
    keep = select("gfpo", rewards, batch, k=k, metric=metric)
    for members in ref.groups_of(gids).values():
        assert sum(bool(keep[i]) for i in members) == min(k, len(members))
    if metric == "score":
        expected = ref.top_within_groups(rewards, gids, k)
    else:
        expected = ref.gfpo(rewards, batch.lengths, gids, k, metric)
    assert torch.equal(keep, expected)


def test_gfpo_efficiency_prefers_short_correct_answers():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    mask = torch.zeros(4, 10, dtype=torch.bool)
    for i, length in enumerate([10, 2, 1, 5]):
        mask[i, :length] = True
    batch = RolloutBatch(rewards, group_ids=torch.zeros(4, dtype=torch.long), completion_mask=mask)
    assert select("gfpo", rewards, batch, k=2).tolist() == [False, True, False, True]
    assert select("gfpo", rewards, batch, k=2, metric="short").tolist() == [False, True, True, False]


# ---------------------------------------------------------------- max_variance


@settings(max_examples=80, deadline=None)
@given(
    grouped(max_size=8, values=st.floats(-2, 2, allow_nan=False, width=32)),
    st.sampled_from([0.25, 0.5, 0.6, 0.75, 1.0]),
)
def test_max_variance_subset_is_optimal_by_brute_force(data, fraction):
    gids, scores = data
    keep = select("max_variance", scores, RolloutBatch(scores, group_ids=gids), keep_fraction=fraction)
    for members in ref.groups_of(gids).values():
        n_keep = ref.max_variance_keep_size(len(members), fraction)
        chosen = [float(scores[i]) for i in members if keep[i]]
        assert len(chosen) == n_keep
        best = ref.max_variance_value([float(scores[i]) for i in members], n_keep)
        assert ref.population_variance(chosen) == pytest.approx(best, rel=1e-6, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(grouped(max_size=16), st.sampled_from([0.3, 0.5]))
def test_max_variance_matches_loop_reference_variance(data, fraction):
    gids, scores = data
    keep = max_variance_subset(scores, gids, fraction)
    expected = ref.max_variance_loop(scores, gids, fraction)
    for members in ref.groups_of(gids).values():
        got = ref.population_variance([float(scores[i]) for i in members if keep[i]])
        want = ref.population_variance([float(scores[i]) for i in members if expected[i]])
        assert got == pytest.approx(want, abs=1e-9)
        assert sum(bool(keep[i]) for i in members) == sum(bool(expected[i]) for i in members)


@settings(max_examples=60, deadline=None)
@given(grouped(max_size=16), st.sampled_from([0.3, 0.5, 0.75]))
def test_max_variance_keeps_the_loop_references_rows(data, fraction):
    gids, scores = data  # many ties: the same rows as the per-group scan, not only the same variance
    assert torch.equal(max_variance_subset(scores, gids, fraction), ref.max_variance_loop(scores, gids, fraction))


def test_max_variance_rounds_half_to_even():
    scores = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0])  # f=0.5, G=5: round(2.5) = 2 kept (DataFlex-RL's maxvar runs)
    keep = max_variance_subset(scores, torch.zeros(5, dtype=torch.long), 0.5)
    assert int(keep.sum()) == 2 and sorted(scores[keep].tolist()) == [0.0, 1.0]


def test_max_variance_permutation_equivariant_with_distinct_scores():
    gids = torch.arange(40) % 5
    scores = torch.randperm(40).float()
    perm = torch.randperm(40)
    keep = max_variance_subset(scores, gids, 0.5)
    assert torch.equal(max_variance_subset(scores[perm], gids[perm], 0.5), keep[perm])


def test_max_variance_ties_are_deterministic():
    gids = torch.zeros(6, dtype=torch.long)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    first = max_variance_subset(scores, gids, 0.5)
    assert int(first.sum()) == 3 and torch.equal(first, max_variance_subset(scores, gids, 0.5))
    assert {float(s) for s in scores[first]} == {0.0, 1.0}


# ---------------------------------------------------------------- entropy_top_tokens


@settings(max_examples=50, deadline=None)
@given(
    st.integers(0, 6), st.integers(1, 7), st.sampled_from([0.05, 0.2, 0.5, 1.0]), st.integers(0, 2**16), st.booleans()
)
def test_top_tokens_count_validity_and_reference(n, length, fraction, seed, ties):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, length, generator=gen) > 0.3
    scores = torch.rand(n, length, generator=gen)
    if ties:
        scores = (scores * 3).floor()
    batch = RolloutBatch(torch.zeros(n), entropies=scores, completion_mask=mask)
    keep = select("entropy_top_tokens", scores, batch, fraction=fraction)
    assert not (keep & ~mask).any()
    n_valid = int(mask.sum())
    assert int(keep.sum()) == (ref.round_count(fraction, n_valid) if n_valid else 0)
    assert torch.equal(keep, ref.top_tokens(scores, mask, fraction))


# ---------------------------------------------------------------- shared edge cases


@pytest.mark.parametrize(
    "name, params", [("threshold_band", {}), ("topk_fraction", {}), ("gfpo", {"metric": "score"}), ("max_variance", {})]
)
def test_empty_batch_selects_nothing(name, params):
    batch = RolloutBatch(torch.zeros(0), group_ids=torch.zeros(0, dtype=torch.long))
    keep = select(name, torch.zeros(0), batch, **params)
    assert keep.shape == (0,) and keep.dtype == torch.bool


def test_singleton_groups():
    scores = torch.tensor([0.0, 1.0, 0.5])
    batch = RolloutBatch(scores, group_ids=torch.tensor([9, 4, 7]), completion_mask=torch.ones(3, 2))
    assert select("max_variance", scores, batch, keep_fraction=0.5).all()  # n = max(1, round(0.5)) = 1
    assert select("gfpo", scores, batch, k=3).all()


def test_wrong_granularity_is_explained():
    batch = RolloutBatch(torch.zeros(2), entropies=torch.zeros(2, 3))
    with pytest.raises(BatchError, match="token-level scores"):
        select("entropy_top_tokens", torch.zeros(2), batch)
    with pytest.raises(BatchError, match="response-level scores"):
        select("topk_fraction", torch.zeros(2, 3), batch)


def test_group_selector_without_groups_names_field():
    with pytest.raises(BatchError, match="group_ids"):
        select("max_variance", torch.zeros(3), RolloutBatch(torch.zeros(3)))


def test_bf16_scores():
    scores = torch.tensor([0.0, 1.0, 0.5, 1.0, 0.0, 0.25], dtype=torch.bfloat16)
    batch = RolloutBatch(scores, group_ids=torch.tensor([0, 0, 0, 1, 1, 1]))
    assert int(select("max_variance", scores, batch).sum()) == 4
    assert int(select("topk_fraction", scores, batch).sum()) == 3


@pytest.mark.parametrize(
    "name, params, fragment",
    [
        ("threshold_band", {"low": "a"}, "'low'"),
        ("threshold_band", {"high": [1]}, "'high'"),
        ("threshold_band", {"low": 1.0, "high": 0.5}, "'low'"),
        ("topk_fraction", {"fraction": "half"}, "'fraction'"),
        ("topk_fraction", {"fraction": 0.0}, "'fraction'"),
        ("topk_fraction", {"largest": "yes"}, "'largest'"),
        ("gfpo", {"k": 2.5}, "'k'"),
        ("gfpo", {"k": "3"}, "'k'"),
        ("gfpo", {"k": 0}, "'k'"),
        ("gfpo", {"metric": ["short"]}, "'metric'"),
        ("max_variance", {"keep_fraction": None}, "'keep_fraction'"),
        ("max_variance", {"keep_fraction": 1.5}, "'keep_fraction'"),
        ("entropy_top_tokens", {"fraction": {}}, "'fraction'"),
    ],
)
def test_wrong_parameters_name_the_parameter(name, params, fragment):
    from dataflex_callbacks import ConfigError

    with pytest.raises(ConfigError, match=fragment):
        build_component("selector", name, **params)


def test_numpy_scalars_are_accepted_as_parameters():
    import numpy as np

    assert (
        build_component("selector", "topk_fraction", fraction=np.float32(0.5), largest=np.bool_(False)).largest is False
    )
    assert build_component("selector", "gfpo", k=np.int64(2)).k == 2


def test_threshold_band_accepts_an_infinite_bound():
    scores = torch.tensor([0.0, 1e-12, 5.0, 1e30])
    keep = select("threshold_band", scores, RolloutBatch(scores), low=0.0, high=float("inf"))
    assert keep.tolist() == [False, True, True, True]


def test_gfpo_efficiency_divides_the_scorers_value_not_the_reward():
    mask = torch.arange(6) < torch.tensor([[6], [1], [3]])
    batch = RolloutBatch(
        torch.tensor([1.0, 0.0, 0.0]), group_ids=torch.zeros(3, dtype=torch.long), completion_mask=mask
    )
    scores = torch.tensor([0.0, 2.0, 3.0])  # e.g. a length-penalised reward model score
    assert select("gfpo", scores, batch, k=1).tolist() == [False, True, False]  # 2/1 beats 3/3 and 0/6


def test_topk_and_gfpo_ties_follow_torch_topk_on_cpu_on_every_device():
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    keep = select("topk_fraction", scores, RolloutBatch(scores), fraction=0.5)
    expected = torch.zeros(10, dtype=torch.bool)
    expected[torch.topk(scores, 5).indices] = True
    assert torch.equal(keep, expected)
    if torch.cuda.is_available():
        cuda = scores.cuda()
        assert torch.equal(select("topk_fraction", cuda, RolloutBatch(cuda), fraction=0.5).cpu(), expected)


@pytest.mark.parametrize(
    "seed, ties, fraction", [(0, False, 0.2), (1, True, 0.2), (2, False, 0.01), (3, True, 0.9), (4, False, 1.0)]
)
def test_top_tokens_on_large_inputs_take_the_sampled_bracket_and_stay_exact(seed, ties, fraction):
    from dataflex_callbacks.components.selectors import kth_largest

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, 1025, (300,), generator=gen)
    mask = torch.arange(1024) < lengths.unsqueeze(1)  # padding at the end of each row, L a power of 2
    scores = torch.rand(300, 1024, generator=gen)
    if ties:
        scores = (scores * 5).floor()
    keep = top_tokens(scores, mask, fraction)
    assert torch.equal(keep, ref.top_tokens_by_sort(scores, mask, fraction))
    values = scores.masked_fill(~mask, float("-inf"))
    for k in (1, 7, int(mask.sum()) // 3, int(mask.sum())):
        assert kth_largest(values, k) == torch.sort(values.reshape(-1), descending=True).values[k - 1]
