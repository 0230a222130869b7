"""`dataflex validate FILE [--host HOST]`: build a strategy file the way the host that will run it does.

Without ``--host``, a verl config (a file with one of verl's top-level sections, `VERL_SECTIONS`,
beside its ``dataflex:`` block) is checked for verl; any other file gets the core's rules, which
every host applies. ``--host`` names the host (`HOSTS`): its adapter then builds the strategy
through its own entry point, with every rule it applies to a config (the rules that need the
trainer, its data or its dataloader run when training starts):

- ``trl`` / ``trl-rloo``: the TRL ``DataFlexCallback`` / ``DataFlexRLOOCallback``, built as
  ``attach`` builds it (the RLOO adapter refuses a ``dynamic_sampling`` part; GRPO refuses one
  beside a ``mix`` part);
- ``lightning``: the Lightning ``DataFlexCallback``, plus the ``SignalGroupBuffer`` a loop builds
  for a ``dynamic_sampling`` part;
- ``verl``: `integrations.verl.config.check_verl_config`, what ``DataFlexPPOTrainer`` runs when
  built (it refuses a ``dynamic_sampling`` part: verl re-samples itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dataflex_callbacks.errors import ConfigError

HOSTS = ("trl", "trl-rloo", "lightning", "verl")
# Top-level sections of a verl (Hydra) config: a file with one of them is a verl run's config.
VERL_SECTIONS = ("trainer", "actor_rollout_ref", "algorithm", "data", "critic", "reward_model", "reward")
_EXTRA = {"trl": "trl", "trl-rloo": "trl", "lightning": "lightning", "verl": "verl"}
CORE_RULES_NOTE = (
    "checked with the core rules, which every host applies; --host {" + ",".join(HOSTS) + "} checks with that host "
    "adapter's own rules too (the rules that need the trainer or its data run when training starts)"
)
"""What `dataflex validate` prints (stderr) after a file passes without ``--host``."""


def host_of(config: Any) -> str | None:
    """``"verl"`` for a verl config (a mapping with a `VERL_SECTIONS` key), else None (no host implied)."""
    if isinstance(config, dict) and any(section in config for section in VERL_SECTIONS):
        return "verl"
    return None


def _read(path: str) -> Any:
    """The file's content, read as every YAML file of the library is (duplicate keys and alias bombs refused)."""
    from dataflex_callbacks.config._yaml_files import read_yaml_file

    return read_yaml_file(path, what="file")


def _with_dynamic_sampling_buffer(strategy):
    """The strategy, after building the `SignalGroupBuffer` a loop builds for its ``dynamic_sampling`` part."""
    if strategy.config.dynamic_sampling is not None:
        from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer

        SignalGroupBuffer(strategy)
    return strategy


def _core(path: str, config: Any):
    from dataflex_callbacks import build_strategy

    return _with_dynamic_sampling_buffer(build_strategy(path))


def _trl(path: str, config: Any):
    from dataflex_callbacks.integrations.trl.callback import DataFlexCallback

    return DataFlexCallback(path).strategy


def _trl_rloo(path: str, config: Any):
    from dataflex_callbacks.integrations.trl.rloo import DataFlexRLOOCallback

    return DataFlexRLOOCallback(path).strategy


def _lightning(path: str, config: Any):
    from dataflex_callbacks.integrations.lightning.callback import DataFlexCallback

    return _with_dynamic_sampling_buffer(DataFlexCallback(path).strategy)


def _verl(path: str, config: Any):
    from dataflex_callbacks.integrations.verl.config import check_verl_config

    if not isinstance(config, dict) or "dataflex" not in config:
        if host_of(config) == "verl":
            raise ConfigError(
                "the verl config has no 'dataflex:' block, so DataFlexPPOTrainer would train without a "
                "strategy; add one, e.g. 'dataflex: {strategy: difffilter}'"
            )
        config = {"dataflex": {"strategy": os.path.abspath(path)}}  # a strategy file, as dataflex.strategy names it
    strategy, _ = check_verl_config(config)
    return strategy


_BUILDERS: dict[str | None, Callable[[str, Any], Any]] = {
    None: _core,
    "trl": _trl,
    "trl-rloo": _trl_rloo,
    "lightning": _lightning,
    "verl": _verl,
}


def read_for_host(path: str, host: str | None = None) -> tuple[Any, str | None]:
    """``(file content, host to check for)``: `host` if given (one of `HOSTS`), else the file's (`host_of`)."""
    if host is not None and host not in HOSTS:
        raise ConfigError(f"unknown host {host!r}; choose one of {', '.join(HOSTS)}")
    config = _read(path)
    return config, host or host_of(config)


def build_for_host(path: str, config: Any, host: str | None):
    """The strategy of the file at `path` as `host`'s adapter builds it (None: a verl block with ``enable: false``).

    `config` is the file's content (`read_for_host`); errors are the adapter's own, one line each.
    """
    try:
        return _BUILDERS[host](path, config)
    except ImportError as error:
        if host is None:
            raise
        raise ConfigError(
            f"checking for {host} needs its adapter's libraries ({error}); install "
            f"'dataflex-callbacks[{_EXTRA[host]}]' or validate with another --host"
        ) from error
