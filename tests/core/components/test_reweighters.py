"""Reweighters: formulas vs reference, normalisation promises (hypothesis), masks, edge cases."""

import core_reference as ref
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import RolloutBatch, build_component
from dataflex_callbacks.components.reweighters import normalize_weights

RESPONSE_LEVEL = {
    "softmax": ({"temperature": 0.7}, lambda s, m: ref.softmax_raw(s, m, 0.7)),
    "difficulty_band": (
        {"low_q": 0.25, "high_q": 0.75, "focus_weight": 3.0},
        lambda s, m: ref.difficulty_band_raw(s, m, 0.25, 0.75, 3.0),
    ),
    "reward_range": (
        {"low": 0.2, "high": 0.8, "inside": 2.0, "outside": 0.5},
        lambda s, m: ref.reward_range_raw(s, 0.2, 0.8, 2.0, 0.5),
    ),
    "per_advantage": ({"alpha": 0.6}, lambda s, m: ref.per_advantage_raw(s, 0.6)),
}


@st.composite
def response_case(draw):
    n = draw(st.integers(0, 24))
    scores = draw(st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=n, max_size=n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    gids = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    return (
        torch.tensor(scores, dtype=torch.float32),
        torch.tensor(mask, dtype=torch.bool),
        torch.tensor(gids, dtype=torch.long),
    )


@settings(max_examples=40, deadline=None)
@given(
    response_case(),
    st.sampled_from(sorted(RESPONSE_LEVEL)),
    st.sampled_from(["mean_one", "per_group_mean_one", "none"]),
)
def test_response_weights_match_reference_and_promises(case, name, normalize):
    scores, mask, gids = case
    params, raw_fn = RESPONSE_LEVEL[name]
    batch = RolloutBatch(scores, group_ids=gids)
    weights = build_component("reweighter", name, normalize=normalize, **params).weights(scores, batch, mask=mask)
    expected = ref.normalize(raw_fn(scores, mask), mask, normalize, gids)
    torch.testing.assert_close(weights, expected, rtol=1e-4, atol=1e-5)
    assert (weights >= 0).all() and torch.isfinite(weights).all()
    assert (weights[~mask] == 0).all()
    if normalize == "mean_one" and mask.any():
        assert float(weights[mask].mean()) == pytest.approx(1.0, rel=1e-5)
    if normalize == "per_group_mean_one":
        for members in ref.groups_of(gids).values():
            kept = [i for i in members if mask[i]]
            if kept:
                assert float(weights[kept].mean()) == pytest.approx(1.0, rel=1e-5)
    # permuting rows permutes the weights
    perm = torch.randperm(scores.shape[0])
    permuted = build_component("reweighter", name, normalize=normalize, **params).weights(
        scores[perm], RolloutBatch(scores[perm], group_ids=gids[perm]), mask=mask[perm]
    )
    torch.testing.assert_close(permuted, weights[perm], rtol=1e-4, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 6),
    st.integers(1, 6),
    st.sampled_from([0.0, 0.3, 1.0]),
    st.integers(0, 2**16),
    st.sampled_from(["mean_one", "per_group_mean_one"]),
)
def test_advantage_reweight_token_weights(n, length, alpha, seed, normalize):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, length, generator=gen) > 0.3
    logprobs = -torch.rand(n, length, generator=gen) * 4
    gids = torch.randint(0, 3, (n,), generator=gen)
    batch = RolloutBatch(torch.zeros(n), group_ids=gids, logprobs=logprobs, completion_mask=mask)
    probs = build_component("scorer", "token_prob").score(batch)
    weights = build_component("reweighter", "advantage_reweight", alpha=alpha, normalize=normalize).weights(
        probs, batch
    )
    assert weights.shape == (n, length)
    assert (weights[~mask] == 0).all() and (weights >= 0).all()
    raw = ref.advantage_reweight_raw(logprobs.exp(), alpha)
    if normalize == "mean_one":
        torch.testing.assert_close(weights, ref.normalize(raw, mask), rtol=1e-4, atol=1e-5)
        if mask.any():
            assert float(weights[mask].mean()) == pytest.approx(1.0, rel=1e-5)
    else:
        for members in ref.groups_of(gids).values():
            sub = mask[members]
            if sub.any():
                assert float(weights[members][sub].mean()) == pytest.approx(1.0, rel=1e-5)


def test_response_mask_on_token_reweighter_combines_with_valid_tokens():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    batch = RolloutBatch(torch.zeros(2), logprobs=torch.zeros(2, 3), completion_mask=mask)
    weights = build_component("reweighter", "advantage_reweight").weights(
        torch.ones(2, 3), batch, mask=torch.tensor([True, False])
    )
    assert weights.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


def test_softmax_hand_computation():
    scores = torch.tensor([0.0, 1.0, 2.0])
    w = build_component("reweighter", "softmax", temperature=1.0).weights(scores, RolloutBatch(scores))
    e = torch.exp(scores)
    torch.testing.assert_close(w, e / e.mean())


def test_zero_raw_weights_fall_back_to_uniform_and_empty_mask_to_zero():
    scores = torch.zeros(4)
    batch = RolloutBatch(scores)
    w = build_component("reweighter", "per_advantage", alpha=1.0).weights(scores, batch)
    assert w.tolist() == [1.0] * 4
    w = build_component("reweighter", "softmax").weights(scores, batch, mask=torch.zeros(4, dtype=torch.bool))
    assert w.tolist() == [0.0] * 4
    assert not torch.isnan(normalize_weights(torch.zeros(0), torch.zeros(0, dtype=torch.bool))).any()


def test_large_scores_do_not_overflow():
    scores = torch.tensor([1000.0, 999.0, -1000.0])
    w = build_component("reweighter", "softmax", temperature=0.01).weights(scores, RolloutBatch(scores))
    assert torch.isfinite(w).all() and float(w.mean()) == pytest.approx(1.0)


def test_bf16_scores():
    scores = torch.tensor([0.1, 0.5, 0.9, 0.3], dtype=torch.bfloat16)
    for name in sorted(RESPONSE_LEVEL):
        w = build_component("reweighter", name).weights(scores, RolloutBatch(scores))
        assert w.dtype == torch.float32 and float(w.mean()) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    "name, params, fragment",
    [
        ("softmax", {"temperature": "1"}, "'temperature'"),
        ("softmax", {"temperature": 0.0}, "'temperature'"),
        ("softmax", {"normalize": ["mean_one"]}, "'normalize'"),
        ("difficulty_band", {"focus_weight": "2"}, "'focus_weight'"),
        ("difficulty_band", {"low_q": 0.9, "high_q": 0.1}, "'low_q'"),
        ("reward_range", {"inside": None}, "'inside'"),
        ("reward_range", {"outside": -1.0}, "'outside'"),
        ("advantage_reweight", {"alpha": True}, "'alpha'"),
        ("advantage_reweight", {"alpha": 1.5}, "'alpha'"),
        ("per_advantage", {"alpha": [0.5]}, "'alpha'"),
    ],
)
def test_wrong_parameters_name_the_parameter(name, params, fragment):
    from dataflex_callbacks import ConfigError

    with pytest.raises(ConfigError, match=fragment):
        build_component("reweighter", name, **params)


def test_per_advantage_gives_zero_advantage_a_small_weight_as_the_reference():
    scores = torch.tensor([0.0, 0.5, 1.0, 2.0])
    w = build_component("reweighter", "per_advantage", alpha=0.5).weights(scores, RolloutBatch(scores))
    assert float(w[0]) > 0
    torch.testing.assert_close(w, ref.dfrl_per_advantage(scores, 0.5))
    assert float(w[0]) == pytest.approx(1e-4 / float(((scores + 1e-8) ** 0.5).mean()), rel=1e-4)


def test_softmax_raw_weights_are_the_same_with_and_without_an_all_true_mask():
    # normalize='none' returns the raw weights exp(score/T - max); without a mask they were a softmax (summing to 1).
    scores = torch.tensor([0.0, 0.0, 1.4])
    reweighter = build_component("reweighter", "softmax", temperature=0.7, normalize="none")
    plain = reweighter.weights(scores, RolloutBatch(scores))
    masked = reweighter.weights(scores, RolloutBatch(scores), mask=torch.ones(3, dtype=torch.bool))
    torch.testing.assert_close(plain, masked)
    torch.testing.assert_close(plain, torch.exp(torch.tensor([-2.0, -2.0, 0.0])))
