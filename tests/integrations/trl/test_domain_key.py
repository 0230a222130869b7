"""A config's ``domain_key`` names the domain column in TRL as in Lightning and verl; ``domain_key=`` otherwise.

``domain_column=``, a name the argument had before any release, is refused with the valid options.
"""

import pytest
from cpu_settings import CPU_RUN_SETTINGS
from datasets import Dataset
from toy_rewards import parity_reward
from trl import GRPOConfig, GRPOTrainer

from dataflex_callbacks.errors import ConfigError, ParamError
from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexGRPOTrainer, attach
from dataflex_callbacks.recipes.tiny_model import build_tiny_model

MIX_ON_SOURCE = {"domain_key": "source", "mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 1}}
YAML_ON_SOURCE = """\
name: mix-by-source
domain_key: source
mix:
  mixer: reward_gap
  warmup_steps: 1
  update_every: 1
"""


@pytest.fixture(scope="module")
def source_data():
    """Domains in ``source``; ``domain`` holds something else, so reading the wrong column shows."""
    n = 12
    return Dataset.from_dict(
        {"prompt": [f"{i}*2=" for i in range(n)], "source": ["gsm", "kk", "mc"] * (n // 3), "domain": ["wrong"] * n}
    )


def build(tiny_tokenizer, data, tmp_path, stock=False, **dataflex):
    """A `DataFlexGRPOTrainer` given the adapter's keyword arguments, or with ``stock`` TRL's own `GRPOTrainer`."""
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        max_steps=2,
        seed=0,
        **CPU_RUN_SETTINGS,
    )
    trainer_class = GRPOTrainer if stock else DataFlexGRPOTrainer
    if not stock:
        dataflex = {"record_decisions": True, **dataflex}
    return trainer_class(
        model=build_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward,
        args=args,
        train_dataset=data,
        processing_class=tiny_tokenizer,
        **dataflex,
    )


@pytest.mark.parametrize("form", ["dict", "yaml"])
def test_config_domain_key_names_the_domain_column(tiny_tokenizer, source_data, tmp_path, form):
    if form == "yaml":
        path = tmp_path / "strategy.yaml"
        path.write_text(YAML_ON_SOURCE)
        strategy = str(path)
    else:
        strategy = MIX_ON_SOURCE
    trainer = build(tiny_tokenizer, source_data, tmp_path / "run", strategy=strategy)
    assert trainer.dataflex.domain_key == "source"
    assert trainer.dataflex.strategy.domains == ["gsm", "kk", "mc"]
    trainer.train()
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert {"dataflex/mix/target/gsm", "dataflex/selection_reward/kk"} <= logged
    assert not any(key.endswith("/wrong") for key in logged)


def test_domain_key_argument_is_used_when_the_config_sets_no_domain_key(tiny_tokenizer, source_data, tmp_path):
    strategy = {"mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 1}}
    trainer = build(tiny_tokenizer, source_data, tmp_path, strategy=strategy, domain_key="source")
    assert trainer.dataflex.domain_key == "source" and trainer.dataflex.strategy.domains == ["gsm", "kk", "mc"]
    default = build(tiny_tokenizer, source_data, tmp_path, strategy=strategy)
    assert default.dataflex.domain_key == "domain" and default.dataflex.strategy.domains == ["wrong"]


def test_the_same_column_given_twice_is_accepted(tiny_tokenizer, source_data, tmp_path):
    trainer = build(tiny_tokenizer, source_data, tmp_path, strategy=MIX_ON_SOURCE, domain_key="source")
    assert trainer.dataflex.domain_key == "source"


@pytest.mark.parametrize("way_in", ["subclass", "attach", "callback"])
def test_the_pre_release_name_domain_column_is_refused_with_the_options(tiny_tokenizer, source_data, tmp_path, way_in):
    strategy = {"mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 1}}
    with pytest.raises(
        ParamError, match=r"unknown option 'domain_column'; the options are selection_reward, domain_key"
    ):
        if way_in == "subclass":
            build(tiny_tokenizer, source_data, tmp_path, strategy=strategy, domain_column="source")
        elif way_in == "attach":
            trainer = build(tiny_tokenizer, source_data, tmp_path, stock=True)
            attach(trainer, strategy, domain_column="source")
        else:
            DataFlexCallback(strategy, domain_column="source")


@pytest.mark.parametrize("way_in", ["subclass", "attach"])
def test_config_domain_key_and_a_different_domain_column_are_refused(tiny_tokenizer, source_data, tmp_path, way_in):
    match = r"domain_key='domain' contradicts the strategy config's domain_key='source'.*give it once"
    with pytest.raises(ConfigError, match=match):
        if way_in == "subclass":
            build(tiny_tokenizer, source_data, tmp_path, strategy=MIX_ON_SOURCE, domain_key="domain")
        else:
            trainer = build(tiny_tokenizer, source_data, tmp_path, stock=True)
            attach(trainer, MIX_ON_SOURCE, domain_key="domain")


def test_config_domain_key_missing_from_the_data_names_domain_key(tiny_tokenizer, tmp_path):
    data = Dataset.from_dict({"prompt": ["1=", "2=", "3=", "4="], "domain": ["a", "b", "a", "b"]})
    with pytest.raises(ConfigError, match=r"domain column 'source' \(the strategy config's domain_key.*set domain_key"):
        build(tiny_tokenizer, data, tmp_path, strategy=MIX_ON_SOURCE)
