"""The typed strategy configs: every field documented, every default written once and used by the loader."""

import dataclasses
import inspect

import pytest

from dataflex_callbacks import ConfigError, ParamError, build_component, build_strategy
from dataflex_callbacks.config import REFERENCE_KEYS, TOP_LEVEL_KEYS, load_config
from dataflex_callbacks.config.fields import (
    CONFIG_CLASSES,
    PART_CLASSES,
    MixConfig,
    SelectConfig,
    StrategyConfig,
    field_defaults,
    field_help,
    required_fields,
)
from dataflex_callbacks.mixing import DomainMixing


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda cls: cls.__name__)
def test_every_field_has_help_and_one_default_or_is_a_required_component(cls):
    for option in dataclasses.fields(cls):
        assert isinstance(option.metadata.get("help"), str) and option.metadata["help"].strip(), option.name
        has_default = option.default is not dataclasses.MISSING
        has_factory = option.default_factory is not dataclasses.MISSING
        assert not (has_default and has_factory), option.name
        if not (has_default or has_factory):
            # Only the components of a part are required: a part without its scorer/selector/mixer means nothing.
            assert option.type in ("ComponentSpec", dict), (cls.__name__, option.name)
    assert cls.__doc__ and cls.__doc__.strip()


def test_the_loader_fills_exactly_the_dataclass_defaults():
    resolved = load_config({"mix": {"mixer": "static"}, "select": {"scorer": "reward", "selector": "topk_fraction"}})
    assert set(resolved) == set(TOP_LEVEL_KEYS) == {f.name for f in dataclasses.fields(StrategyConfig)}
    assert resolved["mix"] == {**field_defaults(MixConfig), "mixer": {"name": "static", "params": {}}}
    assert resolved["select"] == {
        **field_defaults(SelectConfig),
        "scorer": {"name": "reward", "params": {}},
        "selector": {"name": "topk_fraction", "params": {}},
    }
    top_defaults = {k: v for k, v in field_defaults(StrategyConfig).items() if k not in PART_CLASSES}
    assert {k: resolved[k] for k in top_defaults} == top_defaults


def test_domain_mixing_takes_its_settings_from_one_checked_mix_config():
    assert list(inspect.signature(DomainMixing.__init__).parameters) == ["self", "mixer", "config"]
    defaults = field_defaults(MixConfig)
    mixing = DomainMixing(build_component("mixer", "static"), MixConfig(mixer={"name": "static", "params": {}}))
    assert (mixing.window, mixing.warmup_steps, mixing.update_every, mixing.smoothing, mixing.window_unit) == (
        defaults["window"],
        defaults["warmup_steps"],
        defaults["update_every"],
        defaults["smoothing"],
        defaults["window_unit"],
    )
    # Checked once, where the config is built: directly, or through a strategy config.
    for key, value, bound in [("window", 0, ">= 1"), ("update_every", 0, ">= 1"), ("smoothing", 1.0, "< 1.0")]:
        message = rf"^mix: parameter '{key}' must be {bound}; got {value}$"
        with pytest.raises(ParamError, match=message) as direct:
            MixConfig(mixer={"name": "static", "params": {}}, **{key: value})
        with pytest.raises(ParamError, match=message) as built:
            build_strategy({"mix": {"mixer": "static", key: value}})
        assert direct.value.param == built.value.param == key


def test_section_keys_and_required_keys_come_from_the_dataclasses():
    for key, cls in PART_CLASSES.items():
        with pytest.raises(ConfigError) as info:
            load_config({key: {"nonsense": 1}})
        assert f"valid keys: {', '.join(f.name for f in dataclasses.fields(cls))}" in str(info.value)
        first_required = required_fields(cls)[0]
        with pytest.raises(ConfigError, match=f"'{key}' needs key '{first_required}'"):
            load_config({key: {}})


@pytest.mark.parametrize(
    "key, value, where", [("window_unit", "tokens", "mix.window_unit"), ("quota", "fair", "mix.quota")]
)
def test_choice_errors_name_the_choices_and_the_help(key, value, where):
    with pytest.raises(ConfigError) as info:
        load_config({"mix": {"mixer": "static", key: value}})
    message = str(info.value)
    choices = MixConfig.__dataclass_fields__[key].metadata["choices"]
    assert message.startswith(f"{where} must be one of {', '.join(choices)}") and field_help(MixConfig, key) in message


def test_the_dataclasses_validate_when_built_directly():
    with pytest.raises(ConfigError, match=r"mix.domains must be unique; \['a'\] appear more than once"):
        MixConfig(mixer={"name": "static", "params": {}}, domains=["a", "b", "a"])
    assert MixConfig(mixer={"name": "static", "params": {}}, domains="math").domains == ["math"]
    with pytest.raises(ConfigError, match="mix.prior must be a mapping"):
        MixConfig(mixer={"name": "static", "params": {}}, prior=0.5)
    with pytest.raises(ConfigError, match="nan_policy must be one of zero, drop, raise"):
        StrategyConfig(nan_policy="ignore")
    with pytest.raises(ConfigError, match="'name' must be a non-empty string"):
        StrategyConfig(name="")
    assert StrategyConfig().to_dict() == load_config({})


def test_reference_blocks_still_read_through_the_typed_configs():
    mix = load_config({"mechanism": "mix", "actuator": "static", "domains": ["x", "y"], "window": 9})["mix"]
    assert set(mix) == {f.name for f in dataclasses.fields(MixConfig)}
    assert (mix["window"], mix["window_unit"], mix["quota"], mix["update_every"]) == (9, "rows", "exact", 1)
    assert "mechanism" in REFERENCE_KEYS


def test_a_typed_config_builds_the_same_strategy_as_its_dict():
    from dataflex_callbacks import MixConfig, SelectConfig, StrategyConfig, build_strategy

    typed = StrategyConfig(
        select=SelectConfig(
            scorer="group_solve_rate", selector={"name": "threshold_band", "params": {"low": 0.2, "high": 0.8}}
        ),
        mix=MixConfig(mixer="reward_gap", domains=["a", "b"]),
    )
    as_dict = {
        "select": {
            "scorer": "group_solve_rate",
            "selector": {"name": "threshold_band", "params": {"low": 0.2, "high": 0.8}},
        },
        "mix": {"mixer": "reward_gap", "domains": ["a", "b"]},
    }
    assert build_strategy(typed).config == build_strategy(as_dict).config


# ---------------------------------------------------------------- the dynamic_sampling part
from dataflex_callbacks.config.fields import DynamicSamplingConfig  # noqa: E402


@pytest.mark.parametrize("given", [True, {}, DynamicSamplingConfig()])
def test_dynamic_sampling_true_takes_every_default(given):
    assert (
        load_config({"dynamic_sampling": given})["dynamic_sampling"]
        == field_defaults(DynamicSamplingConfig)
        == {"max_rounds": 4, "carry_over": True, "max_age": None}
    )


@pytest.mark.parametrize("given", [None, False])
def test_dynamic_sampling_absent_or_off_is_none(given):
    assert load_config({"dynamic_sampling": given})["dynamic_sampling"] is None
    assert load_config("diffband")["dynamic_sampling"] is None


def test_dynamic_sampling_reads_its_keys_and_names_bad_ones():
    resolved = load_config({"dynamic_sampling": {"max_rounds": 2, "carry_over": False, "max_age": 0}})
    assert resolved["dynamic_sampling"] == {"max_rounds": 2, "carry_over": False, "max_age": 0}
    with pytest.raises(
        ConfigError,
        match=r"'dynamic_sampling': unknown key\(s\) \['rounds'\]; valid keys: "
        r"max_rounds, carry_over, max_age",
    ):
        load_config({"dynamic_sampling": {"rounds": 2}})
    with pytest.raises(ConfigError, match="'dynamic_sampling' must be true"):
        load_config({"dynamic_sampling": "yes"})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("max_rounds", 0, "dynamic_sampling.max_rounds must be an integer >= 1"),
        ("max_rounds", True, "dynamic_sampling.max_rounds must be an integer >= 1"),
        ("max_rounds", 2.0, "dynamic_sampling.max_rounds must be an integer >= 1"),
        ("carry_over", "true", "dynamic_sampling.carry_over must be true or false"),
        ("max_age", -1, "dynamic_sampling.max_age must be an integer >= 0 or null"),
    ],
)
def test_dynamic_sampling_bad_values_name_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config({"dynamic_sampling": {key: value}})
    with pytest.raises(ConfigError, match=message):
        DynamicSamplingConfig(**{key: value})


def test_dynamic_sampling_in_a_typed_config_and_a_dataflex_block():
    typed = StrategyConfig(dynamic_sampling=DynamicSamplingConfig(max_rounds=3))
    assert load_config(typed)["dynamic_sampling"]["max_rounds"] == 3
    assert load_config({"dataflex": {"dynamic_sampling": True}})["dynamic_sampling"]["max_rounds"] == 4
    assert "DAPO arXiv 2503.14476" in StrategyConfig.__dataclass_fields__["dynamic_sampling"].metadata["paper"]
