"""dataflex-callbacks: data strategies (selection, reweighting, domain mixing) for RL fine-tuning.

The core is framework-agnostic: build a `Strategy`, feed it a `RolloutBatch` of the signals
your trainer already computed, and apply its `Decision` to the loss. Host adapters live in
``dataflex_callbacks.integrations`` (``trl``, ``lightning``, ``verl``).
"""

from .batch import RolloutBatch
from .config import list_presets
from .errors import BatchError, ConfigError, DataFlexError, StateError
from .registry import build_component, list_components
from .sampler import DomainMixingSampler
from .strategy import Decision, Strategy, build_strategy
from .tracker import DomainTracker

__version__ = "0.1.0"

__all__ = [
    "BatchError",
    "ConfigError",
    "DataFlexError",
    "Decision",
    "DomainMixingSampler",
    "DomainTracker",
    "RolloutBatch",
    "StateError",
    "Strategy",
    "build_component",
    "build_strategy",
    "list_components",
    "list_presets",
]
