"""Mixers: each formula against a hand computation; the floor is exact on random tracker states."""

import math

import core_reference as ref
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import ConfigError, DomainTracker, RolloutBatch, build_component

DOMAINS = ["a", "b", "c"]


def tracker_with(rewards_per_step, advantages=None, domains=DOMAINS, window=50):
    """rewards_per_step: list of {domain: [rewards]}; one update per entry."""
    tracker = DomainTracker(domains, window=window)
    for step, per_domain in enumerate(rewards_per_step):
        labels = [d for d, values in per_domain.items() for _ in values]
        values = [v for vs in per_domain.values() for v in vs]
        adv = None if advantages is None else torch.tensor([advantages[d] for d in labels], dtype=torch.float32)
        gids = torch.arange(len(values)) // 2
        tracker.update(RolloutBatch(torch.tensor(values), advantages=adv, group_ids=gids, domains=labels), step=step)
    return tracker


def as_array(props):
    return np.array([props[d] for d in DOMAINS])


def test_static_uniform_and_given():
    tracker = DomainTracker(DOMAINS)
    assert build_component("mixer", "static", domains=DOMAINS).proportions(tracker) == pytest.approx(
        {d: 1 / 3 for d in DOMAINS}
    )
    mixer = build_component("mixer", "static", domains=DOMAINS, proportions={"a": 0.5, "b": 0.3, "c": 0.2})
    assert mixer.proportions(tracker) == pytest.approx({"a": 0.5, "b": 0.3, "c": 0.2})


def test_reward_gap_hand_computation():
    tracker = tracker_with([{"a": [1.0, 1.0], "b": [0.0, 1.0], "c": [0.0, 0.0]}])
    p = as_array(
        build_component("mixer", "reward_gap", domains=DOMAINS, temperature=0.5, floor=0.05).proportions(tracker)
    )
    gap = np.array([0.0, 0.5, 1.0])
    q = np.exp(gap / 0.5) / np.exp(gap / 0.5).sum()
    np.testing.assert_allclose(p, 0.05 + (1 - 3 * 0.05) * q, rtol=1e-12)


def test_dump_ucb_hand_computation():
    tracker = tracker_with([{"a": [1.0, 0.0], "b": [1.0, 1.0, 0.0, 0.0]}], advantages={"a": 0.8, "b": 0.2, "c": 0.0})
    p = as_array(
        build_component("mixer", "dump_ucb", domains=DOMAINS, temperature=0.2, c=0.5, floor=0.1).proportions(tracker)
    )
    u = np.array([0.8, 0.2, 0.8])  # c unobserved -> filled with the max observed value
    n = np.array([2.0, 4.0, 0.0])
    score = u + 0.5 * np.sqrt(2 * math.log(n.sum() + 1) / (n + 1))
    np.testing.assert_allclose(p, ref.floor_mix(ref.softmax_np(score, 0.2), 0.1), rtol=1e-6)


@pytest.mark.parametrize("signed", [False, True])
def test_tscl_hand_computation(signed):
    steps = [{"a": [0.1 * s], "b": [1.0 - 0.2 * s], "c": [0.5]} for s in range(4)]
    tracker = tracker_with(steps)
    p = as_array(
        build_component("mixer", "tscl", domains=DOMAINS, temperature=0.1, floor=0.05, signed=signed).proportions(
            tracker
        )
    )
    slope = np.array([0.1, -0.2, 0.0])
    progress = np.maximum(slope, 0) if signed else np.abs(slope)
    np.testing.assert_allclose(p, ref.floor_mix(ref.softmax_np(progress, 0.1), 0.05), rtol=1e-6)


def test_learnability_hand_computation():
    # groups of two: a -> (1,0),(1,1): variances .25, 0 ; b -> (0,0): 0 ; c -> (1,0): .25
    tracker = tracker_with([{"a": [1.0, 0.0, 1.0, 1.0], "b": [0.0, 0.0], "c": [1.0, 0.0]}])
    p = as_array(
        build_component("mixer", "learnability", domains=DOMAINS, temperature=0.05, floor=0.05).proportions(tracker)
    )
    np.testing.assert_allclose(p, ref.floor_mix(ref.softmax_np([0.125, 0.0, 0.25], 0.05), 0.05), rtol=1e-9)


@st.composite
def tracker_states(draw):
    k = draw(st.integers(1, 5))
    domains = [f"d{i}" for i in range(k)]
    tracker = DomainTracker(domains, window=draw(st.integers(1, 6)))
    for step in range(draw(st.integers(0, 8))):
        present = draw(st.lists(st.sampled_from(domains), min_size=1, max_size=6))
        rewards = draw(
            st.lists(st.sampled_from([0.0, 1.0, 0.5, 1e4, -1e4]), min_size=len(present), max_size=len(present))
        )
        adv = draw(
            st.lists(st.floats(-50, 50, allow_nan=False, width=32), min_size=len(present), max_size=len(present))
        )
        tracker.update(
            RolloutBatch(
                torch.tensor(rewards),
                advantages=torch.tensor(adv),
                group_ids=torch.arange(len(present)) // 2,
                domains=present,
            ),
            step=step,
        )
    return tracker


@settings(max_examples=60, deadline=None)
@given(
    tracker_states(),
    st.sampled_from(["static", "reward_gap", "dump_ucb", "tscl", "learnability"]),
    st.floats(0.0, 1.0),
    st.sampled_from([1e-3, 0.1, 5.0]),
)
def test_floor_is_exact_and_proportions_sum_to_one(tracker, name, floor_share, temperature):
    k = len(tracker.domains)
    floor = floor_share / k
    params = {"domains": tracker.domains, "floor": floor}
    if name != "static":
        params["temperature"] = temperature
    props = build_component("mixer", name, **params).proportions(tracker)
    assert list(props) == tracker.domains
    values = np.array(list(props.values()))
    assert np.isfinite(values).all()
    assert values.sum() == pytest.approx(1.0, abs=1e-9)
    assert (values >= floor - 1e-12).all()


def test_floor_too_large_and_domain_mismatch():
    with pytest.raises(ConfigError, match="floor"):
        build_component("mixer", "reward_gap", domains=DOMAINS, floor=0.4)
    mixer = build_component("mixer", "reward_gap", domains=["a", "b"])
    with pytest.raises(ConfigError, match="differ"):
        mixer.proportions(DomainTracker(DOMAINS))
    with pytest.raises(ConfigError, match="no domains"):
        build_component("mixer", "tscl").proportions(DomainTracker(DOMAINS))


def test_static_proportions_as_a_list_in_domain_order():
    tracker = DomainTracker(DOMAINS)
    mixer = build_component("mixer", "static", domains=DOMAINS, proportions=[0.5, 0.3, 0.2])
    assert mixer.proportions(tracker) == pytest.approx({"a": 0.5, "b": 0.3, "c": 0.2})
    late = build_component("mixer", "static", proportions=[0.2, 0.3, 0.5])  # bound later, as by a strategy
    late.bind(DOMAINS)
    assert late.proportions(tracker) == pytest.approx({"a": 0.2, "b": 0.3, "c": 0.5})


@pytest.mark.parametrize(
    "proportions, fragment",
    [
        ([0.5, 0.5], "2 value(s) but there are 3 domain(s)"),
        ([0.5, 0.3, 0.2, 0.0], "4 value(s)"),
        ([0.5, 0.5, 0.5], "normalise"),
        ("uniform", "mapping"),
        (0.5, "mapping"),
        ([0.5, None, 0.5], "finite number"),
    ],
)
def test_static_bad_proportions_explain(proportions, fragment):
    with pytest.raises(ConfigError) as info:
        build_component("mixer", "static", domains=DOMAINS, proportions=proportions)
    assert fragment in str(info.value)


@pytest.mark.parametrize("convert", [np.float64, np.float32, lambda v: torch.tensor(v, dtype=torch.float64), np.array])
def test_numpy_and_torch_scalars_are_numbers(convert):
    values = {"a": convert(0.5), "b": convert(0.25), "c": convert(0.25)}
    mixer = build_component("mixer", "static", domains=DOMAINS, proportions=values)
    assert mixer.proportions(DomainTracker(DOMAINS)) == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})
    gap = build_component("mixer", "reward_gap", domains=DOMAINS, temperature=convert(0.5), floor=convert(0.1))
    assert gap.temperature == 0.5 and type(gap.floor) is float


@pytest.mark.parametrize(
    "domains, fragment",
    [
        ("abc", None),  # a single string is one domain, never a, b, c
        (["a", None], "non-empty string"),
        (["a", ""], "non-empty"),
        (["a", "a"], "unique"),
        ([], "empty"),
        ([1.5], "non-empty string"),
        ({"a": 1}, "list of domain names"),
    ],
)
def test_mixer_domains_are_checked(domains, fragment):
    if fragment is None:
        assert build_component("mixer", "reward_gap", domains=domains).domains == ["abc"]
        return
    with pytest.raises(ConfigError, match=fragment):
        build_component("mixer", "reward_gap", domains=domains)
