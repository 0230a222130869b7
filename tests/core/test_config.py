"""Config forms: presets, the DataFlex-RL legacy block, the composable form, YAML files, wrappers."""

import json

import pytest
import yaml

from dataflex_callbacks import ConfigError, build_strategy, list_presets
from dataflex_callbacks.config import load_config

REQUIRED_PRESETS = {"baseline", "difffilter", "diffband", "topk", "maxvar", "gfpo", "softmax", "ar", "per",
                    "static", "reward_gap", "dump_ucb", "tscl", "learnability"}

COMPOSABLE = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "reweight": {"scorer": {"name": "advantage_magnitude"}, "reweighter": {"name": "softmax", "params": {"temperature": 2.0}}},
    "mix": {"mixer": {"name": "dump_ucb"}, "domains": ["a", "b"], "warmup_steps": 3, "update_every": 2},
}

LEGACY = {"mechanism": "select", "scorer": {"name": "group_solve_rate", "params": {}},
          "actuator": {"name": "threshold_band", "params": {"low": 0.2, "high": 0.8}}, "warmup_step": 4}


def test_presets_listed_with_descriptions():
    presets = list_presets()
    assert REQUIRED_PRESETS <= set(presets)
    assert all(isinstance(text, str) and text for text in presets.values())


def test_composable_form_resolves_and_is_json_serialisable():
    strategy = build_strategy(COMPOSABLE)
    config = strategy.config
    json.dumps(config)
    assert config["select"]["selector"] == {"name": "threshold_band", "params": {"low": 0.2, "high": 0.8}}
    assert config["reweight"]["reweighter"]["params"] == {"temperature": 2.0}
    assert config["mix"]["update_every"] == 2 and config["mix"]["window"] == 50
    assert strategy.domains == ["a", "b"] and strategy.mix_enabled and strategy.needs_groups
    assert build_strategy(config).config == config  # the resolved form is a valid input


def test_legacy_select_block_equals_composable_form():
    legacy = build_strategy(LEGACY)
    composable = build_strategy({"select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8},
                                            "warmup_steps": 4}})
    assert legacy.config["select"] == composable.config["select"]


def test_legacy_reweight_and_mix_blocks():
    reweight = build_strategy({"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"},
                               "actuator": {"name": "softmax", "params": {"temperature": 0.5}}})
    assert reweight.config["reweight"]["reweighter"] == {"name": "softmax", "params": {"temperature": 0.5}}
    mix = build_strategy({"mechanism": "mix", "actuator": {"name": "reward_gap", "params": {"temperature": 0.2}},
                          "warmup_step": 7, "update_step": 3, "domains": ["x", "y", "z"], "domain_key": "source", "window": 9})
    assert mix.config["mix"]["warmup_steps"] == 7 and mix.config["mix"]["update_every"] == 3
    assert mix.config["mix"]["window"] == 9 and mix.domains == ["x", "y", "z"] and mix.domain_key == "source"


def test_yaml_file_and_dataflex_wrapper(tmp_path):
    path = tmp_path / "strategy.yaml"
    path.write_text(yaml.safe_dump({"dataflex": LEGACY}))
    from_file = build_strategy(str(path))
    assert from_file.config["select"] == build_strategy(LEGACY).config["select"]
    assert build_strategy(path).config == from_file.config  # os.PathLike too
    composable_path = tmp_path / "composable.yml"
    composable_path.write_text(yaml.safe_dump(COMPOSABLE))
    assert build_strategy(str(composable_path)).config == build_strategy({"dataflex": COMPOSABLE}).config


@pytest.mark.parametrize(
    "config, fragment",
    [
        ("nonexistent", "presets:"),
        ("missing.yaml", "does not exist"),
        (42, "preset name, a dict or a YAML path"),
        ({"selekt": {}}, "unknown key(s) ['selekt']"),
        ({"select": {"scorer": "reward"}}, "needs key 'selector'"),
        ({"select": {"scorer": "reward", "selector": "topk_fraction", "warmup": 1}}, "unknown key(s) ['warmup']"),
        ({"select": {"scorer": "rewards", "selector": "topk_fraction"}}, "valid scorers"),
        ({"select": {"scorer": "reward", "selector": {"name": "topk_fraction", "frac": 0.1}}}, "'frac'"),
        ({"select": {"scorer": "reward", "selector": {"name": "topk_fraction", "fraction": 0.1, "params": {"fraction": 0.2}}}}, "both inline"),
        ({"select": {"scorer": "reward", "selector": "topk_fraction", "warmup_steps": -1}}, "warmup_steps"),
        ({"select": {"scorer": "token_prob", "selector": "topk_fraction"}}, "response-level scorer"),
        ({"select": {"scorer": "reward", "selector": "entropy_top_tokens"}}, "token_prob or token_entropy"),
        ({"nan_policy": "ignore"}, "nan_policy must be one of zero, drop, raise"),
        ({"mix": {"mixer": "static", "update_every": 0}}, "update_every"),
        ({"mechanism": "filter", "actuator": "x"}, "mechanism must be one of"),
        ({"mechanism": "select", "scorer": "reward"}, "'actuator' is required"),
        ({"mechanism": "select", "actuator": "topk_fraction"}, "needs key 'scorer'"),
        ({"mechanism": "select", "scorer": "reward", "actuator": "topk_fraction", "extra": 1}, "unknown key(s) ['extra']"),
        ({"select": {"scorer": 3, "selector": "topk_fraction"}}, "select.scorer must be a name"),
    ],
)
def test_invalid_configs_explain(config, fragment):
    with pytest.raises(ConfigError) as info:
        build_strategy(config)
    assert fragment in str(info.value)


def test_empty_and_invalid_yaml(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        load_config(str(empty))
    bad = tmp_path / "bad.yaml"
    bad.write_text("select: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(bad))
