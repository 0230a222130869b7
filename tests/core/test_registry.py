"""Registry: names, aliases, and errors that name the bad value and the valid choices."""

import pytest

from dataflex_callbacks import ConfigError, build_component, list_components

EXPECTED = {
    "scorer": ["advantage_magnitude", "group_reward_variance", "group_solve_rate", "response_length", "reward",
               "reward_efficiency", "token_entropy", "token_prob"],
    "selector": ["entropy_top_tokens", "gfpo", "max_variance", "threshold_band", "topk_fraction"],
    "reweighter": ["advantage_reweight", "difficulty_band", "per_advantage", "reward_range", "softmax"],
    "mixer": ["dump_ucb", "learnability", "reward_gap", "static", "tscl"],
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_registered_names(kind):
    assert list_components(kind) == EXPECTED[kind]


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_every_component_builds_with_defaults(kind):
    for name in list_components(kind):
        component = build_component(kind, name)
        assert component.name == name


def test_alias_resolves():
    assert "reward_difficulty" in list_components("scorer", include_aliases=True)
    assert build_component("scorer", "reward_difficulty").name == "reward"


def test_unknown_kind():
    with pytest.raises(ConfigError, match="valid kinds: scorer, selector, reweighter, mixer"):
        list_components("actuator")


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_unknown_name_lists_valid_ones(kind):
    with pytest.raises(ConfigError) as info:
        build_component(kind, "nope")
    message = str(info.value)
    assert "'nope'" in message
    for name in EXPECTED[kind]:
        assert name in message


def test_unknown_param_names_itself_and_accepted():
    with pytest.raises(ConfigError) as info:
        build_component("selector", "threshold_band", lo=0.1)
    assert "'lo'" in str(info.value) and "low" in str(info.value) and "high" in str(info.value)
    with pytest.raises(ConfigError, match="accepted: temperature, normalize"):
        build_component("reweighter", "softmax", temp=2)


@pytest.mark.parametrize(
    "kind, name, params, param",
    [
        ("scorer", "group_solve_rate", {"threshold": "x"}, "threshold"),
        ("scorer", "advantage_magnitude", {"reduce": "median"}, "reduce"),
        ("selector", "threshold_band", {"low": 0.9, "high": 0.1}, "low"),
        ("selector", "topk_fraction", {"fraction": 0.0}, "fraction"),
        ("selector", "topk_fraction", {"fraction": 1.5}, "fraction"),
        ("selector", "topk_fraction", {"largest": "yes"}, "largest"),
        ("selector", "gfpo", {"k": 0}, "k"),
        ("selector", "gfpo", {"k": 2.5}, "k"),
        ("selector", "gfpo", {"metric": "long"}, "metric"),
        ("selector", "max_variance", {"keep_fraction": 0}, "keep_fraction"),
        ("selector", "entropy_top_tokens", {"fraction": -0.1}, "fraction"),
        ("reweighter", "softmax", {"temperature": 0}, "temperature"),
        ("reweighter", "softmax", {"normalize": "sum_one"}, "normalize"),
        ("reweighter", "difficulty_band", {"low_q": 0.9, "high_q": 0.1}, "low_q"),
        ("reweighter", "difficulty_band", {"focus_weight": -1}, "focus_weight"),
        ("reweighter", "reward_range", {"inside": -1}, "inside"),
        ("reweighter", "advantage_reweight", {"alpha": 2}, "alpha"),
        ("reweighter", "per_advantage", {"alpha": float("nan")}, "alpha"),
        ("mixer", "reward_gap", {"temperature": -1}, "temperature"),
        ("mixer", "dump_ucb", {"c": -1}, "c"),
        ("mixer", "tscl", {"signed": 1}, "signed"),
        ("mixer", "learnability", {"floor": -0.1}, "floor"),
        ("mixer", "static", {"domains": ["a", "b"], "floor": 0.6}, "floor"),
        ("mixer", "static", {"domains": ["a", "b"], "proportions": {"a": 0.3, "b": 0.3}}, "sum"),
        ("mixer", "static", {"domains": ["a", "a"]}, "unique"),
    ],
)
def test_invalid_param_values_name_the_param(kind, name, params, param):
    with pytest.raises(ConfigError) as info:
        build_component(kind, name, **params)
    assert param in str(info.value)
    assert name in str(info.value)
