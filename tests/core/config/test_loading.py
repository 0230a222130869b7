"""Config forms: presets, the DataFlex-RL block, the composable form, YAML files, wrappers."""

import json

import pytest
import yaml

from dataflex_callbacks import ConfigError, build_strategy, list_presets
from dataflex_callbacks.config import load_config

REQUIRED_PRESETS = {
    "baseline",
    "difffilter",
    "diffband",
    "topk",
    "maxvar",
    "gfpo",
    "softmax",
    "ar",
    "per",
    "static",
    "reward_gap",
    "dump_ucb",
    "tscl",
    "learnability",
}

COMPOSABLE = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "reweight": {
        "scorer": {"name": "advantage_magnitude"},
        "reweighter": {"name": "softmax", "params": {"temperature": 2.0}},
    },
    "mix": {"mixer": {"name": "dump_ucb"}, "domains": ["a", "b"], "warmup_steps": 3, "update_every": 2},
}

DATAFLEX_RL = {
    "mechanism": "select",
    "scorer": {"name": "group_solve_rate", "params": {}},
    "actuator": {"name": "threshold_band", "params": {"low": 0.2, "high": 0.8}},
    "warmup_step": 4,
}


def test_presets_listed_with_descriptions():
    presets = list_presets()
    assert REQUIRED_PRESETS <= set(presets)
    assert all(isinstance(text, str) and text for text in presets.values())


def test_composable_form_resolves_and_is_json_serialisable():
    strategy = build_strategy(COMPOSABLE)
    config = strategy.config.to_dict()
    json.dumps(config)
    assert config["select"]["selector"] == {"name": "threshold_band", "params": {"low": 0.2, "high": 0.8}}
    assert config["reweight"]["reweighter"]["params"] == {"temperature": 2.0}
    assert config["mix"]["update_every"] == 2 and config["mix"]["window"] == 50
    assert strategy.domains == ["a", "b"] and strategy.mix_enabled and strategy.needs_groups
    assert build_strategy(config).config == strategy.config  # the resolved form is a valid input
    assert build_strategy(strategy.config).config == strategy.config  # and so is the typed form


def test_dataflex_rl_select_block_equals_composable_form():
    reference = build_strategy(DATAFLEX_RL)
    composable = build_strategy(
        {
            "select": {
                "scorer": "group_solve_rate",
                "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8},
                "warmup_steps": 4,
            }
        }
    )
    assert reference.config.select == composable.config.select


def test_dataflex_rl_reweight_and_mix_blocks():
    reweight = build_strategy(
        {
            "mechanism": "reweight",
            "scorer": {"name": "advantage_magnitude"},
            "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
        }
    )
    assert reweight.config.reweight.reweighter == {"name": "softmax", "params": {"temperature": 0.5}}
    mix = build_strategy(
        {
            "mechanism": "mix",
            "actuator": {"name": "reward_gap", "params": {"temperature": 0.2}},
            "warmup_step": 7,
            "update_step": 3,
            "domains": ["x", "y", "z"],
            "domain_key": "source",
            "window": 9,
        }
    )
    assert mix.config.mix.warmup_steps == 7 and mix.config.mix.update_every == 3
    assert mix.config.mix.window == 9 and mix.domains == ["x", "y", "z"] and mix.domain_key == "source"


def test_yaml_file_and_dataflex_wrapper(tmp_path):
    path = tmp_path / "strategy.yaml"
    path.write_text(yaml.safe_dump({"dataflex": DATAFLEX_RL}))
    from_file = build_strategy(str(path))
    assert from_file.config.select == build_strategy(DATAFLEX_RL).config.select
    assert build_strategy(path).config == from_file.config  # os.PathLike too
    composable_path = tmp_path / "composable.yml"
    composable_path.write_text(yaml.safe_dump(COMPOSABLE))
    from_yml, from_dict = (
        build_strategy(source).config.to_dict() for source in (str(composable_path), {"dataflex": COMPOSABLE})
    )
    assert from_yml.pop("name") == "composable" and from_dict.pop("name") == "custom"  # a file names its strategy
    assert from_yml == from_dict


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
        (
            {
                "select": {
                    "scorer": "reward",
                    "selector": {"name": "topk_fraction", "fraction": 0.1, "params": {"fraction": 0.2}},
                }
            },
            "both inline",
        ),
        ({"select": {"scorer": "reward", "selector": "topk_fraction", "warmup_steps": -1}}, "warmup_steps"),
        ({"select": {"scorer": "token_prob", "selector": "topk_fraction"}}, "response-level scorer"),
        ({"select": {"scorer": "reward", "selector": "entropy_top_tokens"}}, "token_prob or token_entropy"),
        ({"nan_policy": "ignore"}, "nan_policy must be one of zero, drop, raise"),
        ({"mix": {"mixer": "static", "update_every": 0}}, "update_every"),
        ({"mechanism": "filter", "actuator": "x"}, "mechanism must be one of"),
        ({"mechanism": "select", "scorer": "reward"}, "'actuator' is required"),
        ({"mechanism": "select", "actuator": "topk_fraction"}, "needs key 'scorer'"),
        (
            {"mechanism": "select", "scorer": "reward", "actuator": "topk_fraction", "extra": 1},
            "unknown key(s) ['extra']",
        ),
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


# ---------------------------------------------------------------- files with verl keys, domain_key, misuse


def test_a_verl_file_is_read_through_its_dataflex_block(tmp_path):
    path = tmp_path / "verl.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "trainer": {"v1": {"trainer_mode": "dataflex_sync"}, "nnodes": 1},
                "data": {"train_batch_size": 8},
                "dataflex": DATAFLEX_RL,
            }
        )
    )
    assert build_strategy(str(path)).config == build_strategy(DATAFLEX_RL).config
    bare = tmp_path / "trainer_only.yaml"
    bare.write_text(yaml.safe_dump({"trainer": {"nnodes": 1}}))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['trainer'\].*under a 'dataflex:' key"):
        build_strategy(str(bare))


def test_domain_key_stays_unset_unless_given():
    assert load_config("reward_gap")["domain_key"] is None
    assert build_strategy({"mix": {"mixer": "static"}}).domain_key is None
    assert build_strategy({"mix": {"mixer": "static"}, "domain_key": "domain"}).domain_key == "domain"
    assert build_strategy({"mechanism": "mix", "actuator": "static", "domain_key": "topic"}).domain_key == "topic"
    for bad in (5, "", ["domain"]):
        with pytest.raises(ConfigError, match="domain_key"):
            load_config({"domain_key": bad})


@pytest.mark.parametrize(
    "domains, expected", [("math", ["math"]), (["math"], ["math"]), ([1, 2], ["1", "2"]), (("a", "b"), ["a", "b"])]
)
def test_mix_domains_forms(domains, expected):
    assert load_config({"mix": {"mixer": "static", "domains": domains}})["mix"]["domains"] == expected
    assert build_strategy({"mechanism": "mix", "actuator": "static", "domains": domains}).domains == expected


@pytest.mark.parametrize(
    "domains, fragment",
    [
        (["math", None], "non-empty string"),
        (["math", "math"], "unique"),
        ([], "empty"),
        ([""], "non-empty"),
        ({"math": 1}, "list of domain names"),
        (3, "list of domain names"),
        ([["a"]], "non-empty string"),
    ],
)
def test_bad_mix_domains_are_refused(domains, fragment, tmp_path):
    with pytest.raises(ConfigError, match=fragment):
        load_config({"mix": {"mixer": "static", "domains": domains}})
    from dataflex_callbacks.recipes.cli import main

    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump({"mix": {"mixer": "static", "domains": domains}}))
    assert main(["validate", str(path)]) == 2


@pytest.mark.parametrize(
    "config, fragment",
    [
        (
            {"select": {"scorer": "reward", "selector": {"name": "topk_fraction", "params": [1, 2]}}},
            "select.selector.params must be a mapping",
        ),
        (
            {"select": {"scorer": {"name": "reward", "params": "x"}, "selector": "topk_fraction"}},
            "select.scorer.params",
        ),
        (
            {"select": {"scorer": "reward", "selector": {"name": "topk_fraction", "params": {"fraction": "half"}}}},
            "parameter 'fraction' must be a number",
        ),
        ({"select": {"scorer": "reward", "selector": {"name": "gfpo", "k": "3"}}}, "parameter 'k' must be an integer"),
        (
            {"select": {"scorer": "reward", "selector": {"name": "topk_fraction", "fractoin": 0.5}}},
            "accepted: fraction",
        ),
        ({"mix": {"mixer": {"name": "reward_gap", "temperature": [1]}}}, "parameter 'temperature'"),
        ({"mix": {"mixer": "static", "window": "50"}}, "parameter 'window'"),
        ({"mix": {"mixer": "static", "window_unit": "tokens"}}, "window_unit"),
        ({"mix": {"mixer": "static", "prior": 0.5}}, "mix.prior"),
        ({"mix": {"mixer": {"name": "static", "proportions": [0.5, 0.5]}, "domains": ["a", "b", "c"]}}, "2 value(s)"),
        ({"mix": {"mixer": "tscl", "domains": ["a"]}, "name": ["x"]}, "'name' must be a non-empty string"),
        ({"nan_policy": ["drop"]}, "nan_policy must be one of"),
        ({"mechanism": "mix", "scorer": "distill_gap", "actuator": "reward_gap"}, "unknown scorer 'distill_gap'"),
        ({"dataflex": [1, 2]}, "'dataflex:' must hold"),
    ],
)
def test_misuse_names_the_parameter(config, fragment):
    with pytest.raises(ConfigError) as info:
        build_strategy(config)
    assert fragment in str(info.value)


def test_numpy_and_torch_numbers_are_accepted_and_stored_plain():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    config = {
        "select": {"scorer": "reward", "selector": {"name": "topk_fraction", "fraction": np.float32(0.25)}},
        "mix": {
            "mixer": {"name": "static", "proportions": {"a": np.float64(0.5), "b": torch.tensor(0.5)}},
            "domains": np.array(["a", "b"]),
            "window": np.int64(5),
            "prior": [np.float64(0.5), 0.5],
        },
    }
    strategy = build_strategy(config)
    json.dumps(strategy.config.to_dict())
    assert type(strategy.config.select.selector["params"]["fraction"]) is float
    assert type(strategy.config.mix.window) is int and strategy.domains == ["a", "b"]


def test_diffband_judges_the_reward_spread_and_difffilter_the_solve_rate():
    diffband = load_config("diffband")["select"]
    assert diffband["scorer"]["name"] == "group_reward_variance"
    assert diffband["selector"] == {"name": "threshold_band", "params": {"low": 0.0, "high": float("inf")}}
    assert "reward variance" in list_presets()["diffband"]
    difffilter = load_config("difffilter")["select"]
    assert difffilter["scorer"]["name"] == "group_solve_rate"
    assert difffilter["selector"]["params"] == {"low": 0.2, "high": 0.8}


def test_the_verl_adapter_wrapper_form_of_the_dataflex_block(tmp_path):
    assert (
        load_config({"trainer": {}, "dataflex": {"strategy": "difffilter", "seed": 3, "enable": True}})["name"]
        == "difffilter"
    )
    assert load_config({"dataflex": {"strategy": DATAFLEX_RL}})["select"] == load_config(DATAFLEX_RL)["select"]
    strategy_file = tmp_path / "s.yaml"
    strategy_file.write_text(yaml.safe_dump(COMPOSABLE))
    assert load_config({"dataflex": {"strategy": str(strategy_file)}}) == {**load_config(COMPOSABLE), "name": "s"}
    for block, fragment in [
        ({"strategy": "difffilter", "select": {}}, "cannot be combined"),
        ({"strategy": "difffilter", "seed": "3"}, "dataflex.seed must be an integer"),
        ({"strategy": "difffilter", "enable": 1}, "dataflex.enable must be true or false"),
        ({"strategy": None}, "dataflex.strategy must be"),
        ({}, "empty"),
    ]:
        with pytest.raises(ConfigError, match=fragment):
            load_config({"dataflex": block})


def test_dynamic_sampling_in_yaml_and_in_a_saved_strategy_state(tmp_path):
    path = tmp_path / "dapo.yaml"
    path.write_text(
        "select: {scorer: group_reward_variance, selector: {name: threshold_band, low: 0.0, high: .inf}}\n"
        "dynamic_sampling: {max_rounds: 3}\n"
    )
    strategy = build_strategy(str(path))
    assert strategy.config.to_dict()["dynamic_sampling"] == {"max_rounds": 3, "carry_over": True, "max_age": None}
    json.dumps(strategy.config.to_dict())
    # A state saved before the part existed has no 'dynamic_sampling' key: it is the same config.
    old = build_strategy("diffband")
    state = old.state_dict()
    del state["config"]["dynamic_sampling"]
    build_strategy("diffband").load_state_dict(state)
    with pytest.raises(ConfigError, match="changed: dynamic_sampling"):
        build_strategy({**load_config("diffband"), "dynamic_sampling": True}).load_state_dict(old.state_dict())


@pytest.mark.parametrize(
    "config", ["difffilter", "skip+difffilter", DATAFLEX_RL, COMPOSABLE, {"dataflex": {"strategy": "ar"}}]
)
def test_the_config_path_reads_a_typed_config_that_builds_the_same_strategy(config):
    from dataflex_callbacks import Strategy, StrategyConfig
    from dataflex_callbacks.config import read_config

    typed = read_config(config)
    assert isinstance(typed, StrategyConfig) and typed.to_dict() == load_config(config)
    assert Strategy(typed.to_dict()).config == build_strategy(config).config == build_strategy(typed).config


def test_a_bad_warmup_is_refused_by_the_config_step():
    from dataflex_callbacks.config import read_config

    for part, actuator in (("select", "topk_fraction"), ("reweight", "softmax")):
        with pytest.raises(ConfigError, match=rf"'{part}.warmup_steps' must be an integer >= 0"):
            read_config(
                {
                    part: {
                        "scorer": "reward",
                        ("selector" if part == "select" else "reweighter"): actuator,
                        "warmup_steps": True,
                    }
                }
            )
