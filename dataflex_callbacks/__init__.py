"""dataflex-callbacks: data strategies (selection, reweighting, domain mixing) for RL fine-tuning.

The core is framework-agnostic: build a `Strategy`, feed it a `RolloutBatch` of the signals
your trainer already computed, and apply its `Decision` to the loss. Host adapters live in
``dataflex_callbacks.integrations`` (``trl``, ``lightning``, ``verl``). A new method subclasses
`Scorer`, `Selector`, `Reweighter`, `Mixer`, `PreSelectFilter` or `Allocator` and is named in configs
through `register` or by its import path; ``dataflex_callbacks.testing`` checks it (docs/extending.md).
"""

from dataflex_callbacks.components.allocation import Allocator  # importing it registers the built-in allocators
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.components.pre_select import PreSelectFilter  # importing it registers the built-in filters
from dataflex_callbacks.components.reweighters import Reweighter
from dataflex_callbacks.components.scorers import Scorer
from dataflex_callbacks.components.selectors import Selector
from dataflex_callbacks.config import list_presets
from dataflex_callbacks.config.fields import (
    DynamicSamplingConfig,
    MixConfig,
    ReweightConfig,
    SelectConfig,
    StrategyConfig,
)
from dataflex_callbacks.errors import (
    ArgumentError,
    BatchError,
    ComponentError,
    ConfigError,
    ContextLengthError,
    DataFlexError,
    DroppedAllWarning,
    HostError,
    InputError,
    NoSignalStepWarning,
    ParamError,
    PilotEvidenceWarning,
    RepeatedRowWarning,
    RewardScaleWarning,
    StateError,
    WrongHostError,
    ZeroRewardWarning,
)
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.mixing.tracker import DomainTracker
from dataflex_callbacks.registry import build_component, list_components, register
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer, SignalGroups, signal_rows
from dataflex_callbacks.sampling.sampler import DomainMixingSampler
from dataflex_callbacks.strategy.strategy import Decision, Strategy, build_strategy

__version__ = "0.1.0"

__all__ = [
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
    "PreSelectFilter",
    "RepeatedRowWarning",
    "ReweightConfig",
    "PilotEvidenceWarning",
    "Reweighter",
    "RewardScaleWarning",
    "RolloutBatch",
    "Scorer",
    "SelectConfig",
    "SignalGroupBuffer",
    "SignalGroups",
    "Selector",
    "StateError",
    "WrongHostError",
    "ZeroRewardWarning",
    "Strategy",
    "StrategyConfig",
    "build_component",
    "build_strategy",
    "list_components",
    "list_presets",
    "register",
    "signal_rows",
]
