"""dataflex-callbacks: data strategies (selection, reweighting, domain mixing) for RL fine-tuning.

The core is framework-agnostic: build a `Strategy`, feed it a `RolloutBatch` of the signals
your trainer already computed, and apply its `Decision` to the loss. Host adapters live in
``dataflex_callbacks.integrations`` (``trl``, ``lightning``, ``verl``). A new method subclasses
`Scorer`, `Selector`, `Reweighter` or `Mixer` and is named in configs through `register` or by
its import path; ``dataflex_callbacks.testing`` checks it (docs/extending.md).
"""

from . import pre_select  # noqa: F401  (registers the built-in pre-rollout filter)
from .batch import RolloutBatch
from .config import list_presets
from .config_fields import DynamicSamplingConfig, MixConfig, ReweightConfig, SelectConfig, StrategyConfig
from .dynamic_sampling import SignalGroupBuffer, SignalGroups, signal_rows
from .errors import (ArgumentError, BatchError, ComponentError, ConfigError, DataFlexError, DroppedAllWarning, HostError,
                     InputError, ParamError, RepeatedRowWarning, RewardScaleWarning, StateError, WrongHostError)
from .mixers import Mixer
from .registry import build_component, list_components, register
from .reweighters import Reweighter
from .sampler import DomainMixingSampler
from .scorers import Scorer
from .selectors import Selector
from .strategy import Decision, Strategy, build_strategy
from .tracker import DomainTracker

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "BatchError",
    "ComponentError",
    "ConfigError",
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
    "ParamError",
    "RepeatedRowWarning",
    "ReweightConfig",
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
    "Strategy",
    "StrategyConfig",
    "build_component",
    "build_strategy",
    "list_components",
    "list_presets",
    "register",
    "signal_rows",
]
