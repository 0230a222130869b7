"""Strategy configs: the YAML/dict loader, DataFlex-RL's `dataflex:` blocks, and the typed config dataclasses."""

from dataflex_callbacks.config._loading import (
    REFERENCE_KEYS,
    TOP_LEVEL_KEYS,
    check_block_alone,
    from_dataflex_rl,
    host_options,
    list_presets,
    load_config,
    read_config,
)
from dataflex_callbacks.config.fields import (
    DynamicSamplingConfig,
    MixConfig,
    ReweightConfig,
    SelectConfig,
    StrategyConfig,
)

__all__ = [
    "REFERENCE_KEYS",
    "TOP_LEVEL_KEYS",
    "DynamicSamplingConfig",
    "MixConfig",
    "ReweightConfig",
    "SelectConfig",
    "StrategyConfig",
    "check_block_alone",
    "from_dataflex_rl",
    "host_options",
    "list_presets",
    "load_config",
    "read_config",
]
