"""Strategy configuration: presets, the two accepted config forms, and their resolution.

Two forms are accepted and resolve to one canonical (composable) dict:

1. The single-mechanism block of the DataFlex-RL verl plugin, unchanged::

       {mechanism: select|reweight|mix, scorer: {name, params}, actuator: {name, params},
        warmup_step, update_step, domains, domain_key, window}

2. The composable form, any subset of ``select``, ``reweight`` and ``mix``::

       select:   {scorer: NAME|{name, params}, selector: NAME|{name, params}, warmup_steps}
       reweight: {scorer: ..., reweighter: ..., warmup_steps}
       mix:      {mixer: ..., domains, window, warmup_steps, update_every, smoothing, prior}
       pre_select: NAME|{name, params}   (pre-rollout prompt skipping, e.g. skip_zero_variance)
       nan_policy: zero|drop|raise
"""

from __future__ import annotations

import copy
import os
from typing import Any, Mapping

from .errors import ConfigError

NAN_POLICIES = ("zero", "drop", "raise")

SELECT_DEFAULTS = {"warmup_steps": 0}
REWEIGHT_DEFAULTS = {"warmup_steps": 0}
MIX_DEFAULTS = {"domains": None, "window": 50, "warmup_steps": 10, "update_every": 5, "smoothing": 0.0, "prior": None}
TOP_LEVEL_KEYS = ("name", "pre_select", "select", "reweight", "mix", "nan_policy", "domain_key")
LEGACY_KEYS = ("mechanism", "scorer", "actuator", "warmup_step", "update_step", "domains", "domain_key", "window", "name")


def _part(scorer, actuator_key, actuator):
    return {"scorer": {"name": scorer[0], "params": scorer[1]}, actuator_key: {"name": actuator[0], "params": actuator[1]}}


def _mix(mixer: str, **params) -> dict:
    return {"mix": {"mixer": {"name": mixer, "params": params}}}


PRESETS: dict[str, tuple[str, dict]] = {
    "baseline": ("no data strategy: every rollout trains with weight 1", {}),
    "difffilter": ("keep groups with solve rate in (0.2, 0.8): 2-3 of 5 correct (online difficulty filtering)",
                   {"select": _part(("group_solve_rate", {}), "selector", ("threshold_band", {"low": 0.2, "high": 0.8}))}),
    "diffband": ("drop all-correct and all-wrong groups (DAPO dynamic sampling)",
                 {"select": _part(("group_solve_rate", {}), "selector", ("threshold_band", {"low": 0.0, "high": 1.0}))}),
    "topk": ("keep the half of responses with the largest |advantage|",
             {"select": _part(("advantage_magnitude", {}), "selector", ("topk_fraction", {"fraction": 0.5}))}),
    "maxvar": ("keep the half of each group with maximal reward variance (PODS)",
               {"select": _part(("reward", {}), "selector", ("max_variance", {"keep_fraction": 0.5}))}),
    "gfpo": ("keep the 3 most reward-per-token responses per group (GFPO)",
             {"select": _part(("reward", {}), "selector", ("gfpo", {"k": 3, "metric": "efficiency"}))}),
    "softmax": ("weight responses by softmax of |advantage|",
                {"reweight": _part(("advantage_magnitude", {}), "reweighter", ("softmax", {"temperature": 1.0}))}),
    "ar": ("token weights alpha*p + (1-alpha) from the current policy (advantage reweighting)",
           {"reweight": _part(("token_prob", {}), "reweighter", ("advantage_reweight", {"alpha": 0.3}))}),
    "per": ("weight responses by |advantage|^0.6 (prioritized replay)",
            {"reweight": _part(("advantage_magnitude", {}), "reweighter", ("per_advantage", {"alpha": 0.6}))}),
    "entropy_top": ("train only on the 20% highest-entropy tokens (80/20 rule)",
                    {"select": _part(("token_entropy", {}), "selector", ("entropy_top_tokens", {"fraction": 0.2}))}),
    "skip": ("skip prompts whose groups keep having zero reward variance, before generation (GRESO)",
             {"pre_select": {"name": "skip_zero_variance", "params": {}}}),
    "static": ("fixed uniform domain proportions", _mix("static")),
    "reward_gap": ("more data for domains whose reward lags", _mix("reward_gap")),
    "dump_ucb": ("UCB on per-domain |advantage| (DUMP)", _mix("dump_ucb")),
    "tscl": ("more data for domains whose reward changes fastest (TSCL)", _mix("tscl")),
    "learnability": ("more data for domains with high group reward variance", _mix("learnability")),
}


def list_presets() -> dict[str, str]:
    """Preset names with a one-line description."""
    return {name: description for name, (description, _) in PRESETS.items()}


def load_config(config: Any) -> dict:
    """Turn a preset name, a YAML path or a dict into the canonical composable dict (validated keys)."""
    if isinstance(config, os.PathLike) or (isinstance(config, str) and (config.endswith((".yaml", ".yml", ".json")) or os.path.isfile(config))):
        config = _read_file(os.fspath(config))
    if isinstance(config, str) and "+" in config:
        return canonicalize(combine_presets(config))
    if isinstance(config, str):
        if config not in PRESETS:
            raise ConfigError(f"unknown strategy preset {config!r}; presets: {', '.join(PRESETS)}; or pass a dict or a YAML path")
        resolved = copy.deepcopy(PRESETS[config][1])
        resolved["name"] = config
        return canonicalize(resolved)
    if not isinstance(config, Mapping):
        raise ConfigError(f"a strategy config must be a preset name, a dict or a YAML path; got {type(config).__name__}")
    config = dict(config)
    if set(config) == {"dataflex"}:
        config = dict(config["dataflex"])
    if "mechanism" in config:
        config = from_legacy(config)
    return canonicalize(config)


def combine_presets(spec: str) -> dict:
    """``"skip+difffilter"``: the union of presets that configure different parts."""
    merged: dict = {"name": spec}
    for name in spec.split("+"):
        if name not in PRESETS:
            raise ConfigError(f"unknown strategy preset {name!r} in {spec!r}; presets: {', '.join(PRESETS)}")
        for key, value in PRESETS[name][1].items():
            if key in merged:
                raise ConfigError(f"presets in {spec!r} both configure '{key}'; combine presets of different parts")
            merged[key] = copy.deepcopy(value)
    return merged


def _read_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise ConfigError(f"strategy config file {path!r} does not exist")
    import yaml

    with open(path, encoding="utf-8") as handle:
        try:
            data = yaml.safe_load(handle)
        except yaml.YAMLError as error:
            raise ConfigError(f"strategy config file {path!r} is not valid YAML: {error}") from error
    if data is None:
        raise ConfigError(f"strategy config file {path!r} is empty")
    return data


def from_legacy(block: Mapping) -> dict:
    """Translate the DataFlex-RL single-mechanism block into the composable form."""
    unknown = sorted(set(block) - set(LEGACY_KEYS))
    if unknown:
        raise ConfigError(f"dataflex block: unknown key(s) {unknown}; valid keys: {', '.join(LEGACY_KEYS)}")
    mechanism = block["mechanism"]
    if mechanism not in ("select", "reweight", "mix"):
        raise ConfigError(f"dataflex block: mechanism must be one of select, reweight, mix; got {mechanism!r}")
    if "actuator" not in block:
        raise ConfigError("dataflex block: key 'actuator' is required (the selector, reweighter or mixer)")
    out: dict = {"name": block.get("name", f"{mechanism}:{_component_name(block['actuator'], 'actuator')}")}
    if "domain_key" in block:
        out["domain_key"] = block["domain_key"]
    warmup = block.get("warmup_step", 0)
    if mechanism == "mix":
        mix = {"mixer": block["actuator"], "warmup_steps": warmup}
        if "update_step" in block:
            mix["update_every"] = block["update_step"]
        for key in ("domains", "window"):
            if key in block:
                mix[key] = block[key]
        out["mix"] = mix
        return out
    if "scorer" not in block:
        raise ConfigError(f"dataflex block: mechanism {mechanism!r} needs key 'scorer'")
    actuator_key = "selector" if mechanism == "select" else "reweighter"
    out[mechanism] = {"scorer": block["scorer"], actuator_key: block["actuator"], "warmup_steps": warmup}
    return out


def _component_name(spec: Any, where: str) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        return spec["name"]
    raise ConfigError(f"{where} must be a name or a mapping with 'name' (and optional 'params'); got {spec!r}")


def component_spec(spec: Any, where: str) -> dict:
    """``NAME``, ``{name, params}`` or ``{name, **params}`` -> ``{name, params}``."""
    name = _component_name(spec, where)
    if isinstance(spec, str):
        return {"name": name, "params": {}}
    params = dict(spec.get("params") or {})
    extra = {k: v for k, v in spec.items() if k not in ("name", "params")}
    overlap = sorted(set(params) & set(extra))
    if overlap:
        raise ConfigError(f"{where}: parameter(s) {overlap} given both inline and under 'params'")
    params.update(extra)
    return {"name": name, "params": params}


def _section(config: Mapping, key: str, component_keys: tuple[str, ...], defaults: dict) -> dict | None:
    if config.get(key) is None:
        return None
    section = config[key]
    if not isinstance(section, Mapping):
        raise ConfigError(f"'{key}' must be a mapping; got {section!r}")
    valid = component_keys + tuple(defaults)
    unknown = sorted(set(section) - set(valid))
    if unknown:
        raise ConfigError(f"'{key}': unknown key(s) {unknown}; valid keys: {', '.join(valid)}")
    out = dict(defaults)
    for name in component_keys:
        if name not in section:
            raise ConfigError(f"'{key}' needs key '{name}'")
        out[name] = component_spec(section[name], f"{key}.{name}")
    out.update({k: section[k] for k in defaults if k in section})
    return out


def canonicalize(config: Mapping) -> dict:
    """Validate top-level and section keys; fill defaults. Components are checked when built."""
    unknown = sorted(set(config) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"strategy config: unknown key(s) {unknown}; valid keys: {', '.join(TOP_LEVEL_KEYS)} "
                          "(or the DataFlex-RL block with 'mechanism')")
    nan_policy = config.get("nan_policy", "zero")
    if nan_policy not in NAN_POLICIES:
        raise ConfigError(f"nan_policy must be one of {', '.join(NAN_POLICIES)}; got {nan_policy!r}")
    pre_select = config.get("pre_select")
    return {
        "name": str(config.get("name", "custom")),
        "pre_select": None if pre_select is None else component_spec(pre_select, "pre_select"),
        "select": _section(config, "select", ("scorer", "selector"), SELECT_DEFAULTS),
        "reweight": _section(config, "reweight", ("scorer", "reweighter"), REWEIGHT_DEFAULTS),
        "mix": _section(config, "mix", ("mixer",), MIX_DEFAULTS),
        "nan_policy": nan_policy,
        "domain_key": str(config.get("domain_key", "domain")),
    }
