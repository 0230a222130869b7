"""Strategy configuration: presets, the two accepted config forms, and their resolution.

Two forms are accepted and resolve to one canonical (composable) dict:

1. The single-mechanism block of the DataFlex-RL verl plugin, unchanged (the "reference form")::

       {mechanism: select|reweight|mix, scorer: {name, params}, actuator: {name, params},
        warmup_step, update_step, domains, domain_key, window}

   Omitted parameters take the reference plugin's defaults (`REFERENCE_DEFAULTS`, an update
   every step, a window of 50 response rows), so such a block decides as it did there.

2. The composable form, any subset of ``select``, ``reweight`` and ``mix``::

       select:   {scorer: NAME|{name, params}, selector: NAME|{name, params}, warmup_steps}
       reweight: {scorer: ..., reweighter: ..., warmup_steps}
       mix:      {mixer: ..., domains, window, window_unit, quota, warmup_steps, update_every, smoothing, prior}
       pre_select: NAME|{name, params}   (pre-rollout prompt skipping, e.g. skip_predicted)
       allocation: NAME|{name, params}   (completions per prompt, decided while generating: screen, adaptive, knapsack)
       dynamic_sampling: true | {max_rounds, carry_over, max_age}   (DAPO dynamic sampling, see dynamic_sampling.py)
       nan_policy: zero|drop|raise
       domain_key: the dataset column holding the domain label (None: the host's default)
       fewer_groups_loss: full|batch   (the loss of a step of fewer groups than the host's batch)

Either form may sit under a ``dataflex:`` key of a larger file (a verl config with ``trainer:``,
``data:``, ... beside it); only that block is read. Every key's help, default and accepted values
are fields of the dataclasses in `config_fields` (`StrategyConfig`, `SelectConfig`, ...).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from collections.abc import Mapping
from typing import Any

from dataflex_callbacks._plain_values import plain  # noqa: F401 (re-exported)
from dataflex_callbacks.config._yaml_files import read_yaml_file
from dataflex_callbacks.config.fields import (
    DynamicSamplingConfig,  # noqa: F401 (re-exported)
    MixConfig,
    ReweightConfig,
    SelectConfig,
    StrategyConfig,
    required_fields,
)
from dataflex_callbacks.errors import ConfigError, PilotEvidenceWarning

TOP_LEVEL_KEYS = tuple(f.name for f in dataclasses.fields(StrategyConfig))
# The keys of DataFlex-RL's single-mechanism block (the reference form), read by `from_dataflex_rl`.
REFERENCE_KEYS = (
    "mechanism",
    "scorer",
    "actuator",
    "warmup_step",
    "update_step",
    "domains",
    "domain_key",
    "window",
    "name",
)

# Defaults of the DataFlex-RL plugin that differ from this library's, filled into reference-form
# blocks that omit them (keyed by canonical component name). Everything else already agrees.
REFERENCE_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("selector", "gfpo"): {"k": 8},
    ("reweighter", "advantage_reweight"): {"alpha": 0.5},
    ("reweighter", "per_advantage"): {"alpha": 0.5},
    ("mixer", "reward_gap"): {"temperature": 1.0},
    ("mixer", "dump_ucb"): {"temperature": 1.0, "c": 1.0},
    ("mixer", "tscl"): {"temperature": 1.0},
}
# Keys a host adapter reads from the ``dataflex:`` block beside the strategy, with the type each must
# have (the verl adapter's ``enable`` and ``seed``; their meaning is the adapter's, in
# dataflex_callbacks/integrations/verl/config.py). Declared here so that a verl file builds the same strategy on every
# host: the loader checks their type (`host_options`) and leaves them out of the strategy.
HOST_KEYS = {"enable": bool, "seed": int}
# The reference plugin's mix schedule (MixConfig fields), filled into reference-form mix blocks.
REFERENCE_MIX = {"warmup_steps": 0, "update_every": 1, "window": 50, "window_unit": "rows", "quota": "exact"}


def _part(scorer: tuple[str, dict], actuator_key: str, actuator: tuple[str, dict]) -> dict:
    return {
        "scorer": {"name": scorer[0], "params": scorer[1]},
        actuator_key: {"name": actuator[0], "params": actuator[1]},
    }


def _mix(mixer: str, **params: Any) -> dict:
    return {"mix": {"mixer": {"name": mixer, "params": params}}}


PRESETS: dict[str, tuple[str, dict]] = {
    "baseline": ("no data strategy: every rollout trains with weight 1", {}),
    "difffilter": (
        "keep groups with solve rate in (0.2, 0.8): 2-3 of 5 correct (online difficulty filtering)",
        {"select": _part(("group_solve_rate", {}), "selector", ("threshold_band", {"low": 0.2, "high": 0.8}))},
    ),
    "diffband": (
        "drop groups whose rewards are all equal, i.e. zero reward variance (DAPO dynamic sampling; any reward scale)",
        {
            "select": _part(
                ("group_reward_variance", {}), "selector", ("threshold_band", {"low": 0.0, "high": float("inf")})
            )
        },
    ),
    "topk": (
        "keep the half of responses with the largest |advantage|",
        {"select": _part(("advantage_magnitude", {}), "selector", ("topk_fraction", {"fraction": 0.5}))},
    ),
    "maxvar": (
        "keep the half of each group with maximal reward variance (PODS)",
        {"select": _part(("reward", {}), "selector", ("max_variance", {"keep_fraction": 0.5}))},
    ),
    "gfpo": (
        "keep the 3 most reward-per-token responses per group (GFPO)",
        {"select": _part(("reward", {}), "selector", ("gfpo", {"k": 3, "metric": "efficiency"}))},
    ),
    "softmax": (
        "weight responses by softmax of |advantage|",
        {"reweight": _part(("advantage_magnitude", {}), "reweighter", ("softmax", {"temperature": 1.0}))},
    ),
    "ar": (
        "token weights alpha*p + (1-alpha) from the current policy (advantage reweighting)",
        {"reweight": _part(("token_prob", {}), "reweighter", ("advantage_reweight", {"alpha": 0.3}))},
    ),
    "per": (
        "weight responses by |advantage|^0.6 (prioritized replay)",
        {"reweight": _part(("advantage_magnitude", {}), "reweighter", ("per_advantage", {"alpha": 0.6}))},
    ),
    "entropy_top": (
        "train only on the 20% highest-entropy tokens (80/20 rule)",
        {"select": _part(("token_entropy", {}), "selector", ("entropy_top_tokens", {"fraction": 0.2}))},
    ),
    "dapo": (
        "drop zero-variance groups and generate further rounds until the step holds a full batch of groups "
        "that carry signal (DAPO dynamic sampling, arXiv 2503.14476)",
        {
            "select": _part(
                ("group_reward_variance", {}), "selector", ("threshold_band", {"low": 0.0, "high": float("inf")})
            ),
            "dynamic_sampling": {"max_rounds": 4, "carry_over": True},
        },
    ),
    "skip": (
        "skip prompts predicted, from their domain and streak, to be solved or to give no signal, before "
        "generation (GRESO-style, with the skip rule learnt from the run)",
        {"pre_select": {"name": "skip_predicted", "params": {}}},
    ),
    "greso": (
        "skip prompts whose groups keep having zero reward variance, before generation (GRESO's streak rule)",
        {"pre_select": {"name": "skip_zero_variance", "params": {}}},
    ),
    "skip_fewer": (
        "skip's rule without refilling: a skipped prompt is not replaced, the step trains on the groups it kept "
        "at fewer completions, normalised to a full update (TRL GRPOTrainer; docs/pre_select.md)",
        {"pre_select": {"name": "skip_predicted", "params": {}, "refill": False}},
    ),
    "greso_fewer": (
        "greso's streak rule without refilling: a skipped prompt is not replaced, the step trains on the groups it "
        "kept at fewer completions, normalised to a full update (TRL GRPOTrainer; docs/pre_select.md)",
        {"pre_select": {"name": "skip_zero_variance", "params": {}, "refill": False}},
    ),
    "screen": (
        "a pilot of 2 completions per prompt; the rest of the group only where the pilot's rewards differ, the "
        "pilot joining its group (SPEED-RL arXiv 2506.09016, Pilot-Commit arXiv 2605.26606)",
        {"allocation": {"name": "screen", "params": {}}},
    ),
    "screen_posterior": (
        "screen with a Beta posterior on each prompt's pass rate (its pilot, earlier pilots and its domain's fitted "
        "spread): commit where the full group carries signal with probability >= 0.7 (Pilot-Commit arXiv 2605.26606)",
        {"allocation": {"name": "screen", "params": {"rule": "posterior", "min_signal": 0.7}}},
    ),
    "screen_greso": (
        "greso's skip before generation, then screen_posterior's pilot of 2: a prompt whose groups keep having zero "
        "reward variance costs nothing, any other its pilot, the rest of the group only where signal is likely "
        "(GRESO arXiv 2506.02177, Pilot-Commit arXiv 2605.26606)",
        {
            "allocation": {"name": "screen", "params": {"rule": "posterior", "min_signal": 0.7}},
            "pre_select": {"name": "skip_zero_variance", "params": {}},
        },
    ),
    "screen_fewer": (
        "screen_posterior without refill: a pilot of 2 for each drawn prompt, the rest of the group where signal is "
        "likely, and the step trains only those groups: fewer completions per update (issue 47)",
        {"allocation": {"name": "screen", "params": {"rule": "posterior", "min_signal": 0.7, "refill": False}}},
    ),
    "pilot_commit": (
        "Pilot-Commit's decisions: a pilot of G/4 completions per prompt; the rest of the group where the pilot's "
        "pass rate lies in [0.125, 0.75]; a prompt whose pilot was all correct is evicted (arXiv 2605.26606); for "
        "groups of 32 or more: at G = 8 it regressed on the testbed (docs/benchmarks.md)",
        {
            "allocation": {
                "name": "screen",
                "params": {"pilot": 0.25, "rule": "band", "lower": 0.125, "upper": 0.75, "evict": True},
            }
        },
    ),
    "adaptive": (
        "stages of 4 completions per prompt until one is correct, up to 16 (AR3PO arXiv 2509.25808)",
        {"allocation": {"name": "adaptive", "params": {}}},
    ),
    "knapsack": (
        "a budget of 0.75 x B x G completions per step spread over the drawn prompts by the chance each group carries "
        "signal (Knapsack RL arXiv 2509.25849)",
        {"allocation": {"name": "knapsack", "params": {}}},
    ),
    "static": ("fixed uniform domain proportions", _mix("static")),
    "reward_gap": ("more data for domains whose reward lags", _mix("reward_gap")),
    "dump_ucb": ("UCB on per-domain |advantage| (DUMP)", _mix("dump_ucb")),
    "tscl": ("more data for domains whose reward changes fastest (TSCL)", _mix("tscl")),
    "learnability": ("more data for domains with high group reward variance", _mix("learnability")),
}


def list_presets() -> dict[str, str]:
    """Preset names with a one-line description."""
    return {name: description for name, (description, _) in PRESETS.items()}


UNNAMED = StrategyConfig.name
"""The name of a strategy config that sets none; one read from a file is named after the file instead."""


def load_config(config: Any) -> dict:
    """Turn a preset name, a YAML path or a dict into the canonical composable dict (validated keys).

    The plain-dict form of `read_config` (what `Strategy` takes and checkpoints store).
    """
    return read_config(config).to_dict()


def read_config(config: Any) -> StrategyConfig:
    """Read a preset name, a YAML path, a dict or a `StrategyConfig` into a checked `StrategyConfig`, defaults filled.

    The first step of the config path (file -> `StrategyConfig` -> `Strategy` -> components).
    A mapping (or file) with a ``dataflex:`` key is read through that block, whatever else sits
    beside it (``trainer:``, ``data:``, ``actor_rollout_ref:`` of a verl config). A `StrategyConfig`
    (the typed form) is read through its ``to_dict()``. Components are checked when built.
    """
    if isinstance(config, StrategyConfig):
        config = {key: value for key, value in config.to_dict().items() if value is not None}
    if isinstance(config, os.PathLike) or (
        isinstance(config, str) and (config.endswith((".yaml", ".yml", ".json")) or os.path.isfile(config))
    ):
        path = os.fspath(config)
        typed = read_config(_read_file(path))
        if typed.name == UNNAMED:  # a file that names no strategy goes by its own name in logs and warnings
            typed = dataclasses.replace(typed, name=os.path.splitext(os.path.basename(path))[0])
        return typed
    config = plain(config)
    if isinstance(config, str) and "+" in config:
        return _typed(combine_presets(config))
    if isinstance(config, str):
        if config not in PRESETS:
            raise ConfigError(
                f"unknown strategy preset {config!r}; presets: {', '.join(PRESETS)}; or pass a dict or a YAML path"
            )
        resolved = copy.deepcopy(PRESETS[config][1])
        resolved["name"] = config
        return _typed(resolved)
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"a strategy config must be a preset name, a dict or a YAML path; got {type(config).__name__}"
        )
    if "dataflex" in config:
        return read_config(_dataflex_block(dict(config)))
    config = dict(config)
    if "mechanism" in config:
        config = from_dataflex_rl(config)
    return _typed(config)


def _dataflex_block(config: dict) -> Any:
    """The strategy of a config's ``dataflex:`` block (a mapping, a preset name or a path), or ``config`` itself.

    The block may also use the verl adapter's wrapper form ``{strategy: <preset|path|mapping>,
    enable: bool, seed: int}``; ``enable`` and ``seed`` are checked here and used by the adapter.
    """
    if "dataflex" not in config:
        return config
    block = config["dataflex"]
    check_block_alone(config)
    if block is None or (isinstance(block, Mapping) and not block):
        raise ConfigError("the 'dataflex:' block is empty; give a preset name or a strategy mapping under it")
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        raise ConfigError(f"'dataflex:' must hold a strategy mapping or a preset name; got {type(block).__name__}")
    block = dict(block)
    host_options(block)
    if "strategy" in block:
        extra = sorted(set(block) - {"strategy"})
        if extra:
            raise ConfigError(
                f"dataflex: key 'strategy' names a whole strategy; it cannot be combined with key(s) "
                f"{extra}. Put them in the strategy's YAML file, or drop 'strategy'"
            )
        if block["strategy"] is None or isinstance(block["strategy"], Mapping) and "dataflex" in block["strategy"]:
            raise ConfigError(
                f"dataflex.strategy must be a preset name, a YAML path or a strategy mapping; got {block['strategy']!r}"
            )
        return block["strategy"]
    return block


def check_block_alone(config: Mapping) -> None:
    """Refuse strategy keys (``select:``, ``mechanism:``, ...) beside a ``dataflex:`` block: only the block is read.

    Every host reads a file's strategy from its ``dataflex:`` block alone, so a strategy key beside
    it would be ignored; a `ConfigError` names the keys.
    """
    clash = sorted(set(config.keys()) & (set(TOP_LEVEL_KEYS) | set(REFERENCE_KEYS)))
    if clash:
        raise ConfigError(
            f"the config has a 'dataflex:' block and strategy key(s) {clash} beside it, which would be "
            "ignored (only the block is read); put the whole strategy inside 'dataflex:'"
        )


def host_options(block: dict) -> dict:
    """Take the `HOST_KEYS` out of a ``dataflex:`` block (in place) and return them, each checked to have its type."""
    options = {key: block.pop(key) for key in HOST_KEYS if key in block}
    for key, value in options.items():
        kind = HOST_KEYS[key]
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
            raise ConfigError(
                f"dataflex.{key} must be {'true or false' if kind is bool else 'an integer'}; got {value!r}"
            )
    return options


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
    data = read_yaml_file(path)
    if data is None:
        raise ConfigError(f"strategy config file {path!r} is empty")
    return data


def from_dataflex_rl(block: Mapping) -> dict:
    """Translate the DataFlex-RL single-mechanism block into the composable form, with the reference's defaults."""
    unknown = sorted(set(block) - set(REFERENCE_KEYS))
    if unknown:
        raise ConfigError(f"dataflex block: unknown key(s) {unknown}; valid keys: {', '.join(REFERENCE_KEYS)}")
    mechanism = block["mechanism"]
    if mechanism not in ("select", "reweight", "mix"):
        raise ConfigError(f"dataflex block: mechanism must be one of select, reweight, mix; got {mechanism!r}")
    if "actuator" not in block:
        raise ConfigError("dataflex block: key 'actuator' is required (the selector, reweighter or mixer)")
    actuator_key = {"select": "selector", "reweight": "reweighter", "mix": "mixer"}[mechanism]
    actuator = _with_reference_defaults(actuator_key, component_spec(block["actuator"], "dataflex.actuator"))
    out: dict = {"name": block.get("name", f"{mechanism}:{actuator['name']}")}
    if "domain_key" in block:
        out["domain_key"] = block["domain_key"]
    warmup = block.get("warmup_step", 0)
    if mechanism == "mix":
        if "scorer" in block:
            _check_mix_scorer(block["scorer"])
        mix = {**REFERENCE_MIX, "mixer": actuator, "warmup_steps": warmup}
        if "update_step" in block:
            mix["update_every"] = block["update_step"]
        for key in ("domains", "window"):
            if key in block:
                mix[key] = block[key]
        out["mix"] = mix
        return out
    if "scorer" not in block:
        raise ConfigError(f"dataflex block: mechanism {mechanism!r} needs key 'scorer'")
    out[mechanism] = {"scorer": block["scorer"], actuator_key: actuator, "warmup_steps": warmup}
    return out


def _with_reference_defaults(kind: str, spec: dict) -> dict:
    from dataflex_callbacks.registry import component_class

    try:
        canonical = component_class(kind, spec["name"]).name
    except ConfigError:
        return spec  # the build step names the unknown component with the valid choices
    defaults = REFERENCE_DEFAULTS.get((kind, canonical), {})
    return {"name": spec["name"], "params": {**defaults, **spec["params"]}}


def _check_mix_scorer(spec: Any) -> None:
    # Each mixer reads the signal its paper defines (reward, |advantage|, reward slope, variance), so
    # the block's scorer only has to exist: an unknown one (e.g. an on-policy-distillation signal)
    # must fail here, not be ignored.
    from dataflex_callbacks.registry import build_component

    scorer = component_spec(spec, "dataflex.scorer")
    build_component("scorer", scorer["name"], **scorer["params"])


def _component_name(spec: Any, where: str) -> str:
    if isinstance(spec, str) and spec:
        return spec
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and spec["name"]:
        return spec["name"]
    raise ConfigError(f"{where} must be a name or a mapping with 'name' (and optional 'params'); got {spec!r}")


def component_spec(spec: Any, where: str) -> dict:
    """``NAME``, ``{name, params}`` or ``{name, **params}`` -> ``{name, params}``."""
    name = _component_name(spec, where)
    if isinstance(spec, str):
        return {"name": name, "params": {}}
    raw = spec.get("params")
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}.params must be a mapping of parameter names to values (e.g. {{alpha: 0.5}}); got {raw!r}"
        )
    params = plain(dict(raw or {}))
    bad_names = [k for k in params if not isinstance(k, str)]
    if bad_names:
        raise ConfigError(f"{where}.params: parameter names must be strings; got {bad_names}")
    extra = {k: plain(v) for k, v in spec.items() if k not in ("name", "params")}
    overlap = sorted(set(params) & set(extra))
    if overlap:
        raise ConfigError(f"{where}: parameter(s) {overlap} given both inline and under 'params'")
    params.update(extra)
    return {"name": name, "params": params}


def pre_select_spec(spec: Any) -> dict:
    """``pre_select``'s component spec -> ``{name, params, refill}``: ``refill`` is the part's own key, not a param."""
    refill = True
    if isinstance(spec, Mapping) and "refill" in spec:
        spec = dict(spec)
        refill = spec.pop("refill")
        if not isinstance(refill, bool):
            raise ConfigError(
                f"pre_select.refill must be true or false (false: a skipped prompt is not replaced, the step trains "
                f"on fewer groups); got {refill!r}"
            )
    return {**component_spec(spec, "pre_select"), "refill": refill}


def _section(config: Mapping, key: str, cls: type) -> Any:
    """The part ``key`` of ``config`` as its dataclass ``cls`` (None when absent): keys checked, defaults filled."""
    if config.get(key) is None:
        return None
    section = config[key]
    if not isinstance(section, Mapping):
        raise ConfigError(f"'{key}' must be a mapping; got {section!r}")
    valid = tuple(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(section) - set(valid))
    if unknown:
        raise ConfigError(f"'{key}': unknown key(s) {unknown}; valid keys: {', '.join(valid)}")
    components = required_fields(cls)
    values = {}
    for name in components:
        if name not in section:
            raise ConfigError(f"'{key}' needs key '{name}'")
        values[name] = component_spec(section[name], f"{key}.{name}")
    values.update({k: plain(section[k]) for k in valid if k in section and k not in components})
    return cls(**values)


def canonicalize(config: Mapping) -> dict:
    """Validate top-level and section keys; fill defaults (from the `config_fields` dataclasses); the plain dict.

    Components are checked when built.
    """
    return _typed(config).to_dict()


def _typed(config: Mapping) -> StrategyConfig:
    """A composable-form mapping as a checked `StrategyConfig` (every part's keys checked, defaults filled)."""
    unknown = sorted(set(config) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(
            f"strategy config: unknown key(s) {unknown}; valid keys: {', '.join(TOP_LEVEL_KEYS)} "
            "(or the DataFlex-RL block with 'mechanism'); a verl or trainer config must hold the "
            "strategy under a 'dataflex:' key"
        )
    typed = StrategyConfig(
        **{k: config[k] for k in ("nan_policy", "name", "domain_key", "fewer_groups_loss") if k in config}
    )
    pre_select = config.get("pre_select")
    typed.pre_select = None if pre_select is None else pre_select_spec(pre_select)
    allocation = config.get("allocation")
    typed.allocation = None if allocation is None else component_spec(allocation, "allocation")
    typed.select = _section(config, "select", SelectConfig)
    typed.reweight = _section(config, "reweight", ReweightConfig)
    typed.mix = _section(config, "mix", MixConfig)
    typed.dynamic_sampling = _dynamic_sampling(config.get("dynamic_sampling"))
    if typed.allocation is not None and typed.pre_select is not None and typed.pre_select["name"] == "skip_predicted":
        warnings.warn(
            PilotEvidenceWarning(
                "pre_select skip_predicted beside an allocation part learns from the allocation's pilots (a few "
                "completions each), whose rewards agree far more often than a full group's, so it reads every state "
                "as giving no signal and skips alike; to skip before the pilot use the screen allocator's "
                "min_prior_signal (rule: posterior), or drop the pre_select part"
            ),
            stacklevel=2,
        )
    return typed


def _dynamic_sampling(section: Any) -> DynamicSamplingConfig | None:
    """``dynamic_sampling``: absent, None or false -> None; true -> the defaults; a mapping -> its keys checked."""
    if section is None or section is False:
        return None
    if section is True:
        return DynamicSamplingConfig()
    if isinstance(section, DynamicSamplingConfig):
        section = dataclasses.asdict(section)
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"'dynamic_sampling' must be true (every default) or a mapping of "
            f"{', '.join(f.name for f in dataclasses.fields(DynamicSamplingConfig))}; got {section!r}"
        )
    valid = tuple(f.name for f in dataclasses.fields(DynamicSamplingConfig))
    unknown = sorted(set(section) - set(valid))
    if unknown:
        raise ConfigError(f"'dynamic_sampling': unknown key(s) {unknown}; valid keys: {', '.join(valid)}")
    return DynamicSamplingConfig(**{key: plain(value) for key, value in section.items()})
