"""Typed strategy configs: each part of a strategy as a dataclass whose fields document themselves.

A field's help, default, accepted choices and source paper are written once, here;
`config.load_config` reads either config form into these classes and returns their plain-dict
form, and `DomainMixing` takes its settings as one checked `MixConfig`. Read them with `field_help` and
`field_defaults`, e.g. ``field_help(MixConfig, "window")``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from dataflex_callbacks.config.params import check_int, check_number
from dataflex_callbacks.config.proportions import check_domains, check_proportions_form
from dataflex_callbacks.errors import ConfigError, ParamError

NAN_POLICIES = ("zero", "drop", "raise")
FEWER_GROUPS_LOSSES = ("full", "batch")
WINDOW_UNITS = ("steps", "rows")
QUOTAS = ("independent", "exact")  # DomainMixingSampler's batch split; "exact" is DataFlex-RL's replay buffer

DAPO = "DAPO arXiv 2503.14476, section 3.2 (dynamic sampling)"
DATAFLEX_RL = "DataFlex-RL verl plugin (the reference implementation this library reproduces)"


def config_field(
    default: Any = MISSING, *, help: str, paper: str | None = None, choices: tuple[str, ...] | None = None
) -> Any:
    """A dataclass field that carries its help text (and source paper, accepted choices) in ``metadata``.

    Leave ``default`` out for a required field.
    """
    metadata: dict[str, Any] = {"help": help}
    if paper is not None:
        metadata["paper"] = paper
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return field(default=default, metadata=metadata)


def _field(cls: type, name: str) -> dataclasses.Field:
    """Field ``name`` of config dataclass ``cls`` (a `KeyError` for a name it does not have)."""
    return {f.name: f for f in fields(cls)}[name]


def field_help(cls: type, name: str) -> str:
    """The help text of field ``name`` of config dataclass ``cls``."""
    return _field(cls, name).metadata["help"]


def field_defaults(cls: type) -> dict[str, Any]:
    """``{field: default}`` of the fields of ``cls`` that have one (required fields are left out)."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def required_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` without a default, in declaration order."""
    return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def _check_choice(cls: type, name: str, value: Any, where: str) -> None:
    info = _field(cls, name).metadata
    choices = info["choices"]
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{where} must be one of {', '.join(choices)} ({info['help']}); got {value!r}")


def _check_warmup(part: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"'{part}.warmup_steps' must be an integer >= 0; got {value!r}")


# A component is given as ``NAME``, ``{name, params}`` or ``{name, **params}``; the loader
# stores it as ``{"name": str, "params": dict}``. Components check their own parameters when built.
ComponentSpec = dict


@dataclass
class SelectConfig:
    """``select``: score each rollout, keep a subset; dropped rows leave the loss (their weight is 0)."""

    scorer: ComponentSpec = config_field(
        help="what each response, group or token is judged by (e.g. group_solve_rate, token_entropy); "
        "`dataflex list` names every scorer with its paper"
    )
    selector: ComponentSpec = config_field(
        help="which scored rows to keep (e.g. threshold_band: DAPO arXiv 2503.14476; max_variance: PODS arXiv "
        "2504.13818; gfpo: GFPO arXiv 2508.09726)"
    )
    warmup_steps: int = config_field(0, help="optimizer steps before the selector acts; until then every row trains")

    def __post_init__(self) -> None:
        _check_warmup("select", self.warmup_steps)


@dataclass
class ReweightConfig:
    """``reweight``: score each rollout and scale its loss weight (tokens or responses)."""

    scorer: ComponentSpec = config_field(
        help="what each response or token is weighted by (e.g. advantage_magnitude, token_prob)"
    )
    reweighter: ComponentSpec = config_field(
        help="how scores become weights (e.g. softmax; advantage_reweight: arXiv 2505.12929; per_advantage: "
        "prioritized replay arXiv 1511.05952)"
    )
    warmup_steps: int = config_field(0, help="optimizer steps before the reweighter acts; until then every weight is 1")

    def __post_init__(self) -> None:
        _check_warmup("reweight", self.warmup_steps)


@dataclass
class MixConfig:
    """``mix``: choose how many prompts of each domain the sampler draws, from per-domain training statistics."""

    mixer: ComponentSpec = config_field(
        help="the rule turning per-domain statistics into sampling proportions (e.g. reward_gap; dump_ucb: DUMP "
        "arXiv 2504.09710; tscl: TSCL arXiv 1707.00183; learnability; static)"
    )
    domains: list[str] | None = config_field(
        None, help="the domains to mix, in order; None takes them from the dataset's domain column"
    )
    window: int = config_field(50, help="observations kept per domain by the tracker (see window_unit)")
    window_unit: str = config_field(
        "steps",
        choices=WINDOW_UNITS,
        paper=DATAFLEX_RL,
        help="what one window slot holds: one step's observation, or one response row",
    )
    quota: str = config_field(
        "independent",
        choices=QUOTAS,
        paper=DATAFLEX_RL,
        help="how a batch is split among domains: independent draws, or exact largest-remainder counts",
    )
    warmup_steps: int = config_field(10, help="steps on the prior before the mixer first recomputes proportions")
    update_every: int = config_field(5, help="steps between two recomputations of the proportions")
    smoothing: float = config_field(
        0.0, help="in [0, 1): p <- smoothing * p_old + (1 - smoothing) * p_new at each update (0: no smoothing)"
    )
    prior: Any = config_field(
        None,
        help="starting proportions, a mapping {domain: proportion} or a list in domain order; "
        "None: the mixer's own start, else uniform",
    )

    def __post_init__(self) -> None:
        # The one check of a mix part's settings: `DomainMixing` takes the checked config whole.
        if self.domains is not None:
            self.domains = check_domains(self.domains, "mix.domains")
        _check_choice(MixConfig, "window_unit", self.window_unit, "mix.window_unit")
        _check_choice(MixConfig, "quota", self.quota, "mix.quota")
        if self.prior is not None:
            self.prior = check_proportions_form(self.prior, "mix.prior")
        try:
            self.window = check_int("window", self.window, low=1)
            self.warmup_steps = check_int("warmup_steps", self.warmup_steps, low=0)
            self.update_every = check_int("update_every", self.update_every, low=1)
            check_number("smoothing", self.smoothing, low=0.0, high=1.0, high_open=True)
        except ParamError as error:
            raise ParamError(f"mix: {error}", error.param) from error


@dataclass
class DynamicSamplingConfig:
    """``dynamic_sampling``: over-generate until a step holds B groups that carry signal, and train on exactly those.

    A group carries signal when it survives the strategy's ``select`` part, or, without one, when
    its rewards are not all equal. A training loop drives it through
    `dataflex_callbacks.sampling.dynamic_sampling.SignalGroupBuffer`; ``dynamic_sampling: true`` takes
    every default.
    """

    max_rounds: int = config_field(
        4,
        paper=DAPO,
        help="generation rounds per step at most (>= 1); when they are spent short of B signal groups, the "
        "step trains on what there is and logs dynamic/short=1",
    )
    carry_over: bool = config_field(
        True, help="keep signal groups beyond B for the next steps, which take them first (False: drop them)"
    )
    max_age: int | None = config_field(
        None,
        help="drop a carried group once it has waited more than this many steps (>= 0; 0 drops every "
        "carried group at the next step); None: never drop carried groups for staleness",
    )

    def __post_init__(self) -> None:
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds < 1:
            raise ConfigError(
                f"dynamic_sampling.max_rounds must be an integer >= 1 (generation rounds per step at "
                f"most); got {self.max_rounds!r}"
            )
        if not isinstance(self.carry_over, bool):
            raise ConfigError(f"dynamic_sampling.carry_over must be true or false; got {self.carry_over!r}")
        if self.max_age is not None and (
            isinstance(self.max_age, bool) or not isinstance(self.max_age, int) or self.max_age < 0
        ):
            raise ConfigError(
                f"dynamic_sampling.max_age must be an integer >= 0 or null (never drop carried groups "
                f"for staleness); got {self.max_age!r}"
            )


@dataclass
class StrategyConfig:
    """A whole strategy: any subset of the parts, plus how non-finite rewards are treated and the domain column."""

    name: str = config_field("custom", help="a label for logs and checkpoints (a preset's name when built from one)")
    pre_select: ComponentSpec | None = config_field(
        None,
        paper="GRESO arXiv 2506.02177",
        help="pre-rollout prompt skipping, before generation (skip_predicted or skip_zero_variance); None: every drawn "
        "prompt is generated. Its key refill (default true): a skipped prompt is replaced by the next one the sampler "
        "draws; false: it is not replaced, and the step trains on fewer groups at fewer completions (TRL GRPOTrainer)",
    )
    allocation: ComponentSpec | None = config_field(
        None,
        paper="SPEED-RL arXiv 2506.09016; Pilot-Commit arXiv 2605.26606; AR3PO arXiv 2509.25808",
        help="rollout allocation, while generating: how many completions each prompt gets (screen: a pilot of k, "
        "the rest of the group only where it predicts signal; adaptive: stages until a correct answer, up to a cap); "
        "None: every prompt gets the host's group size",
    )
    select: SelectConfig | None = config_field(None, help="the select part (SelectConfig); None: keep every row")
    reweight: ReweightConfig | None = config_field(None, help="the reweight part (ReweightConfig); None: weight 1")
    mix: MixConfig | None = config_field(None, help="the mix part (MixConfig); None: the host's own sampling")
    dynamic_sampling: DynamicSamplingConfig | None = config_field(
        None,
        paper=DAPO,
        help="the dynamic_sampling part (DynamicSamplingConfig; true: its defaults); None: each step trains the "
        "groups it generated",
    )
    nan_policy: str = config_field(
        "zero",
        choices=NAN_POLICIES,
        help="a non-finite reward or score: zero (treated as 0), drop (its row leaves the loss) or raise (an error)",
    )
    domain_key: str | None = config_field(
        None,
        help="the dataset column holding the domain label; None: the host's default column "
        "(verl: data_source, else domain)",
    )
    fewer_groups_loss: str = config_field(
        "full",
        choices=FEWER_GROUPS_LOSSES,
        help="the loss of a step that trains fewer groups than the host's batch (pre_select refill: false; "
        "allocation refill: false, groups_per_step, or groups of different sizes: adaptive, knapsack): full (the "
        "mean over the groups it trains: every step a full update however few its groups) or batch (over the host's "
        "whole batch, the groups it did not generate counting as groups without signal: plain GRPO's update on the "
        "same drawn prompts when those groups carry no signal, a step of K of B groups moving the policy about K/B "
        "as far)",
    )

    def __post_init__(self) -> None:
        _check_choice(StrategyConfig, "nan_policy", self.nan_policy, "nan_policy")
        _check_choice(StrategyConfig, "fewer_groups_loss", self.fewer_groups_loss, "fewer_groups_loss")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"'name' must be a non-empty string; got {self.name!r}")
        if self.domain_key is not None and (not isinstance(self.domain_key, str) or not self.domain_key):
            raise ConfigError(
                f"domain_key must be the name of the dataset column holding the domain label; got {self.domain_key!r}"
            )

    def to_dict(self) -> dict:
        """The canonical plain-dict form (what `load_config` returns and checkpoints store)."""
        return dataclasses.asdict(self)


PART_CLASSES: Mapping[str, type] = {"select": SelectConfig, "reweight": ReweightConfig, "mix": MixConfig}
CONFIG_CLASSES = (StrategyConfig, SelectConfig, ReweightConfig, MixConfig, DynamicSamplingConfig)
