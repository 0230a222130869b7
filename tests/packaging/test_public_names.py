"""The package's public names, written out; the DataFlex-RL names that stay; and no pre-release name left.

Nothing is released yet, so a name changed before the first release is gone, with no alias and no
DeprecationWarning (docs/architecture.md, "One name per concept"). The only second names are
DataFlex-RL's (github.com/haolpku/DataFlex-RL, a verl plugin), kept because its users bring their
verl configs unchanged; each is listed here with the file of that repository that uses it.
"""

import importlib
import inspect

import pytest

from dataflex_callbacks import ConfigError, build_component, build_strategy, list_components
from dataflex_callbacks.config import REFERENCE_KEYS, from_dataflex_rl, load_config

PUBLIC = {
    "dataflex_callbacks": [
        "AllocationRounds",
        "Allocator",
        "ArgumentError",
        "BatchError",
        "ComponentError",
        "ConfigError",
        "ContextLengthError",
        "DataFlexError",
        "Decision",
        "DomainMixingSampler",
        "DomainTracker",
        "DroppedAllWarning",
        "DynamicSamplingConfig",
        "HostError",
        "InputError",
        "MixConfig",
        "Mixer",
        "NoSignalStepWarning",
        "ParamError",
        "PilotEvidenceWarning",
        "PreSelectFilter",
        "RepeatedRowWarning",
        "RewardScaleWarning",
        "ReweightConfig",
        "Reweighter",
        "RolloutBatch",
        "Scorer",
        "SelectConfig",
        "Selector",
        "SignalGroupBuffer",
        "SignalGroups",
        "StateError",
        "Strategy",
        "StrategyConfig",
        "WrongHostError",
        "ZeroRewardWarning",
        "build_component",
        "build_strategy",
        "list_components",
        "list_presets",
        "register",
        "signal_rows",
    ],
    "dataflex_callbacks.config": [
        "DynamicSamplingConfig",
        "MixConfig",
        "REFERENCE_KEYS",
        "ReweightConfig",
        "SelectConfig",
        "StrategyConfig",
        "TOP_LEVEL_KEYS",
        "check_block_alone",
        "from_dataflex_rl",
        "host_options",
        "list_presets",
        "load_config",
        "read_config",
    ],
    "dataflex_callbacks.rollout": ["Decision", "NO_DOMAIN", "RolloutBatch"],
    "dataflex_callbacks.components": [
        "AdaptiveAllocator",
        "Allocator",
        "KnapsackAllocator",
        "PreSelectFilter",
        "PromptHistory",
        "Reweighter",
        "Scorer",
        "ScreenAllocator",
        "Selector",
        "SkipPredictedFilter",
        "SkipZeroVarianceFilter",
    ],
    "dataflex_callbacks.mixing": ["DomainMixing", "DomainTracker", "Mixer"],
    "dataflex_callbacks.strategy": ["Decision", "Strategy", "build_strategy"],
    "dataflex_callbacks.sampling": [
        "AllocatedGroups",
        "AllocationRounds",
        "DomainMixingSampler",
        "SignalGroupBuffer",
        "SignalGroups",
        "signal_rows",
    ],
    "dataflex_callbacks.host": [
        "AGGREGATIONS",
        "AcceptedPrompts",
        "AllocationAbilities",
        "BatchFeed",
        "Candidates",
        "DEFAULT_DOMAIN_KEY",
        "HostDeclaration",
        "HostLosses",
        "OWN_LOOP",
        "PARTS",
        "PromptAcceptance",
        "PromptSource",
        "REFUSED",
        "ROLLOUT_FIELDS",
        "ROW_NORMALISED",
        "RUNS",
        "TENSOR_FIELDS",
        "YOU_DRIVE",
        "acts_before_rollout",
        "aggregate",
        "as_strategy",
        "batch_fields",
        "check_aggregation",
        "checkpoint_state",
        "decide",
        "finish_loss",
        "grpo_fields",
        "host_declaration",
        "host_losses",
        "kept_token_mask",
        "load_state_file",
        "local_decision",
        "loss_aggregation",
        "micro_batch_decision",
        "prompt_choosing_parts",
        "read_state_file",
        "register_host",
        "registered_hosts",
        "removal_scale",
        "resolve_domain_key",
        "restore_strategy",
        "restrict_rows",
    ],
    "dataflex_callbacks.testing": [
        "ConformanceError",
        "ConformanceReport",
        "check_component",
        "check_host_decisions",
        "check_host_declaration",
    ],
    "dataflex_callbacks.integrations.trl": [
        "DataFlexAsyncCallback",
        "DataFlexAsyncGRPOTrainer",
        "DataFlexCallback",
        "DataFlexGRPOTrainer",
        "DataFlexRLOOCallback",
        "DataFlexRLOOTrainer",
        "DataFlexTrainerMixin",
        "SUPPORTED_LOSS_TYPES",
        "attach",
    ],
    "dataflex_callbacks.integrations.lightning": [
        "BoundStrategy",
        "DataFlexCallback",
        "LOSS_TYPES",
        "ShardedSampler",
        "build_sampler",
    ],
    "dataflex_callbacks.integrations.verl": [
        "loss_fields_from_decision",
        "rollout_batch_from_fields",
        "strategy_from_verl_config",
    ],
}
HOST_FRAMEWORKS = {
    "dataflex_callbacks.integrations.trl": "trl",
    "dataflex_callbacks.integrations.lightning": "lightning",
}


def _module(name: str):
    if name in HOST_FRAMEWORKS:
        pytest.importorskip(HOST_FRAMEWORKS[name])
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_package_exports_the_written_names(name):
    module = _module(name)
    assert sorted(module.__all__) == sorted(PUBLIC[name]), f"{name}.__all__ changed: update PUBLIC in this test"
    missing = [public for public in module.__all__ if not hasattr(module, public)]
    assert not missing, f"{name}.__all__ names what the package does not define: {missing}"


# ------------------------------------------------------------ the DataFlex-RL names that stay

# src/dataflex_verl/build.py (mechanism, scorer, actuator, warmup_step, update_step) and trainer.py
# (domains, domain_key, window): the keys of its `dataflex:` block. `name` is this library's strategy name.
DATAFLEX_RL_KEYS = {"mechanism", "scorer", "actuator", "warmup_step", "update_step", "domains", "domain_key", "window"}

# README.md's three examples (reweight, select, mix), each a `dataflex:` block of a verl config.
DATAFLEX_RL_BLOCKS = [
    {
        "mechanism": "reweight",
        "scorer": {"name": "advantage_magnitude", "params": {"agg": "mean"}},
        "actuator": {"name": "softmax", "params": {"temperature": 1.0}},
        "warmup_step": 0,
    },
    {
        "mechanism": "select",
        "scorer": {"name": "group_solve_rate", "params": {"success_threshold": 0.5}},
        "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0}},
    },
    {
        "mechanism": "mix",
        "domains": ["gsm8k_short", "gsm8k_long"],
        "domain_key": "domain",
        "scorer": {"name": "reward_difficulty"},
        "actuator": {"name": "reward_gap", "params": {"temperature": 1.0, "floor": 0.05}},
        "warmup_step": 5,
        "update_step": 5,
        "window": 50,
    },
]

# Registered names with DataFlex-RL's parameters: src/dataflex_verl/configs/components.yaml, scorers.py,
# selectors.py, reweighters.py, mixers.py. `reward_difficulty`, `agg` and `success_threshold` are its
# names of this library's `reward`, `reduce` and `threshold`.
DATAFLEX_RL_COMPONENTS = [
    ("scorer", "reward_difficulty", {}),
    ("scorer", "advantage_magnitude", {"agg": "mean"}),
    ("scorer", "group_solve_rate", {"success_threshold": 0.5}),
    ("scorer", "token_prob", {}),
    ("selector", "threshold_band", {"low": 0.0, "high": 1.0}),
    ("selector", "topk_fraction", {"fraction": 0.5, "largest": True}),
    ("selector", "gfpo", {"k": 8, "metric": "efficiency"}),
    ("selector", "max_variance", {"keep_fraction": 0.5}),
    ("reweighter", "softmax", {"temperature": 1.0}),
    ("reweighter", "difficulty_band", {"low_q": 0.25, "high_q": 0.75, "focus_weight": 2.0}),
    ("reweighter", "advantage_reweight", {"alpha": 0.5}),
    ("reweighter", "per_advantage", {"alpha": 0.5}),
    ("mixer", "reward_gap", {"domains": ["a", "b"], "temperature": 1.0, "floor": 0.05}),
    ("mixer", "static", {"domains": ["a", "b"], "proportions": [0.5, 0.5]}),
    ("mixer", "dump_ucb", {"domains": ["a", "b"], "temperature": 1.0, "c": 1.0, "floor": 0.05}),
    ("mixer", "tscl", {"domains": ["a", "b"], "temperature": 1.0, "floor": 0.05, "signed": False}),
]


def test_the_dataflex_rl_block_keys_are_read():
    assert DATAFLEX_RL_KEYS <= set(REFERENCE_KEYS)


@pytest.mark.parametrize("block", DATAFLEX_RL_BLOCKS, ids=lambda block: block["mechanism"])
def test_a_dataflex_rl_block_builds_under_its_dataflex_key(block):
    verl_config = {"trainer": {"v1": {"trainer_mode": "dataflex_sync"}}, "dataflex": block}
    assert load_config(verl_config) == load_config(from_dataflex_rl(block))
    strategy = build_strategy(verl_config)
    assert getattr(strategy, {"select": "select", "reweight": "reweight", "mix": "mixing"}[block["mechanism"]])


@pytest.mark.parametrize(
    "kind, name, params", DATAFLEX_RL_COMPONENTS, ids=[f"{kind}-{name}" for kind, name, _ in DATAFLEX_RL_COMPONENTS]
)
def test_a_dataflex_rl_component_builds_with_its_parameters(kind, name, params):
    assert name in list_components(kind, include_aliases=True)
    build_component(kind, name, **params)


def test_dataflex_rl_names_mean_this_library_s_names():
    assert build_component("scorer", "reward_difficulty").name == "reward"
    assert build_component("scorer", "group_solve_rate", success_threshold=0.3).threshold == 0.3
    assert build_component("scorer", "advantage_magnitude", agg="max").reduce == "max"


def test_the_dataflex_rl_mix_trainer_mode_is_registered():
    # README.md's mix example: `trainer_mode: dataflex_mix_sync` (src/dataflex_verl/trainer.py registers it).
    from dataflex_callbacks.integrations.verl.plugin import TRAINER_NAMES

    assert {"dataflex_sync", "dataflex_mix_sync"} <= set(TRAINER_NAMES)


# ------------------------------------------------------------ no pre-release name left

OLD_CLASS_NAMES = {  # module -> class names it had before the naming rule (docs/architecture.md)
    "dataflex_callbacks.components.selectors": [
        "ThresholdBand",
        "TopkFraction",
        "GFPOFilter",
        "GroupFilter",
        "MaxVariance",
        "EntropyTopTokens",
    ],
    "dataflex_callbacks.components.reweighters": [
        "SoftmaxWeights",
        "DifficultyBand",
        "RewardRange",
        "AdvantageReweight",
        "StalenessDiscount",
        "PERAdvantage",
        "PrioritizedAdvantage",
    ],
    "dataflex_callbacks.mixing.mixers": ["DumpUcbMixer", "TsclMixer"],
    "dataflex_callbacks.components.pre_select": ["SkipZeroVariance", "SkipPredictedNoSignal"],
    "dataflex_callbacks.components": ["SkipZeroVariance", "SkipPredictedNoSignal"],
    "dataflex_callbacks.config": ["LEGACY_KEYS", "from_legacy"],
    "dataflex_callbacks.config._loading": ["LEGACY_KEYS", "from_legacy"],
    "dataflex_callbacks.registry": ["KIND_ALIASES"],
}


@pytest.mark.parametrize("module, old", [(module, old) for module, names in OLD_CLASS_NAMES.items() for old in names])
def test_an_earlier_name_is_gone(module, old):
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), old)


def test_the_earlier_kind_name_prerollout_is_refused():
    with pytest.raises(ConfigError, match=r"unknown component kind 'prerollout'; valid kinds: .*pre_select"):
        build_component("prerollout", "skip_predicted")


def test_observe_drawn_is_gone():
    from dataflex_callbacks.mixing import DomainMixing

    with pytest.raises(AttributeError):
        _ = DomainMixing.observe_drawn


def test_the_sampler_has_no_key_column():
    from dataflex_callbacks import DomainMixingSampler

    with pytest.raises(TypeError, match="key_column"):
        DomainMixingSampler(labels=["a", "b"], batch_size=1, key_column="qid")
    assert not hasattr(DomainMixingSampler, "key_column")


@pytest.mark.parametrize("command", ["run", "compare"])
def test_the_domain_column_flag_is_refused(command, capsys):
    from dataflex_callbacks.recipes.cli import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([command, "--domain-column", "topic"])
    assert info.value.code == 2
    assert "unrecognized arguments: --domain-column topic" in capsys.readouterr().err


def test_the_recipes_take_no_domain_column():
    from dataflex_callbacks.recipes.options import RunOptions
    from dataflex_callbacks.recipes.tasks.loading import load_prompt_dataset, load_prompt_table

    with pytest.raises(TypeError, match="domain_column"):
        RunOptions(domain_column="topic")
    for function in (load_prompt_dataset, load_prompt_table):
        assert "domain_column" not in inspect.signature(function).parameters


def test_the_trl_adapter_takes_no_domain_column():
    pytest.importorskip("trl")
    from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexGRPOTrainer, attach, callback

    for function in (DataFlexCallback.__init__, DataFlexGRPOTrainer.__init__, attach):
        assert "domain_column" not in inspect.signature(function).parameters, function.__qualname__
    assert not hasattr(callback, "renamed_option")
    assert not hasattr(DataFlexCallback, "history") and not hasattr(DataFlexCallback, "domain_column")
