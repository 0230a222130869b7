"""The top-level ``dataflex:`` block of a verl Hydra config, validated at trainer start.

The block is a strategy config in either form the core accepts (see
`dataflex_callbacks.build_strategy`): the DataFlex-RL single-mechanism block, unchanged::

    dataflex:
      mechanism: select
      scorer: {name: group_solve_rate}
      actuator: {name: threshold_band, params: {low: 0.2, high: 0.8}}

or the composable form (``select`` / ``reweight`` / ``mix`` / ``pre_select``), or a preset name
or YAML path under ``strategy``::

    dataflex:
      strategy: difffilter

Adapter keys, accepted in every form: ``enable`` (default true) and ``seed`` (the prompt sampler's
seed; default ``data.seed``).
"""

from __future__ import annotations

from typing import Any, Mapping

from dataflex_callbacks import Strategy, build_strategy
from dataflex_callbacks.errors import ConfigError

ADAPTER_KEYS = ("enable", "seed")


def dataflex_block(config: Any) -> dict | None:
    """The ``dataflex`` block of a verl config as a plain dict (None when absent or empty)."""
    block = config.get("dataflex", None) if hasattr(config, "get") else None
    if block is None:
        return None
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(block, DictConfig):
            block = OmegaConf.to_container(block, resolve=True)
    except ImportError:  # pragma: no cover - verl always ships omegaconf
        pass
    if isinstance(block, str):
        return {"strategy": block}
    if not isinstance(block, Mapping):
        raise ConfigError(f"verl config 'dataflex' must be a mapping (a strategy config) or a preset name; "
                          f"got {block!r}")
    return dict(block) or None


def strategy_from_verl_config(config: Any) -> tuple[Strategy | None, dict]:
    """``(strategy or None, adapter options)`` from a verl config; errors name the bad key.

    Returns ``(None, options)`` when the block is absent or ``enable: false``.
    """
    block = dataflex_block(config)
    if block is None:
        return None, {}
    options = {key: block.pop(key) for key in ADAPTER_KEYS if key in block}
    enable = options.get("enable", True)
    if not isinstance(enable, bool):
        raise ConfigError(f"dataflex.enable must be true or false; got {enable!r}")
    seed = options.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"dataflex.seed must be an integer; got {seed!r}")
    if not enable:
        return None, options
    if "strategy" in block:
        extra = sorted(set(block) - {"strategy"})
        if extra:
            raise ConfigError(f"dataflex: key 'strategy' names a whole strategy; it cannot be combined with "
                              f"key(s) {extra}. Put them in the strategy's YAML file, or drop 'strategy'")
        spec = block["strategy"]
    else:
        spec = block
    if not spec:
        raise ConfigError("dataflex: the block is empty; set e.g. 'dataflex.strategy: difffilter' or remove it")
    try:
        return build_strategy(spec), options
    except ConfigError as error:
        raise ConfigError(f"verl config 'dataflex': {error}") from error
