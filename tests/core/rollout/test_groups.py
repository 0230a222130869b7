"""Segment reductions against per-group loops, on arbitrary (non-contiguous) group ids."""

import core_reference as ref
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks.rollout.groups import (
    dense_groups,
    group_sizes,
    rank_within_groups,
    segment_mean,
    segment_sum,
    segment_variance,
    sort_within_groups,
)

group_batches = st.lists(st.tuples(st.integers(-5, 40), st.floats(-3, 3, allow_nan=False, width=32)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(group_batches)
def test_segment_reductions_match_loops(rows):
    gids = torch.tensor([g for g, _ in rows], dtype=torch.long)
    values = torch.tensor([v for _, v in rows], dtype=torch.float64)
    index, count = dense_groups(gids)
    assert count == len(set(gids.tolist()))
    groups = ref.groups_of(gids)
    sums, means, variances = (
        segment_sum(values, index, count),
        segment_mean(values, index, count),
        segment_variance(values, index, count),
    )
    sizes = group_sizes(index, count)
    for members in groups.values():
        g = int(index[members[0]])
        assert all(int(index[i]) == g for i in members)
        vals = [float(values[i]) for i in members]
        assert float(sizes[g]) == len(members)
        assert abs(float(sums[g]) - sum(vals)) < 1e-9
        assert abs(float(means[g]) - sum(vals) / len(vals)) < 1e-9
        assert abs(float(variances[g]) - ref.population_variance(vals)) < 1e-9


@settings(max_examples=60, deadline=None)
@given(group_batches, st.booleans())
def test_rank_within_groups_is_stable_order(rows, descending):
    gids = torch.tensor([g for g, _ in rows], dtype=torch.long)
    values = torch.tensor([round(v) for _, v in rows], dtype=torch.float32)  # many ties
    index, count = dense_groups(gids)
    ranks = rank_within_groups(sort_within_groups(values, index, descending), index, count)
    for members in ref.groups_of(gids).values():
        sign = -1 if descending else 1
        expected = sorted(members, key=lambda i: (sign * float(values[i]), i))
        assert [int(ranks[i]) for i in expected] == list(range(len(members)))


def test_empty_groups():
    index, count = dense_groups(torch.zeros(0, dtype=torch.long))
    assert count == 0 and index.shape == (0,)
    assert segment_variance(torch.zeros(0), index, count).shape == (0,)


def test_every_group_equal_against_a_loop_over_groups():
    from dataflex_callbacks.rollout.groups import every_group_equal

    group_ids = torch.tensor([3, 1, 3, 1, 7])  # groups need not be adjacent
    for values in ([0.0, 1.0, 0.0, 1.0, 5.0], [0.0, 1.0, 0.0, 0.0, 5.0], [float("nan")] * 5, [2.0] * 5):
        values = torch.tensor(values)
        expected = all(
            bool((values[group_ids == g] == values[group_ids == g][0]).all()) for g in torch.unique(group_ids)
        )
        assert every_group_equal(values, group_ids) == expected, values
