"""A strategy's components, built from its typed config: each scorer paired with its actuator, and the mixing.

The last step of the config path (file -> `StrategyConfig` -> `Strategy` -> components): each
component spec is ``{name, params}``; the registry builds the class, whose constructor checks
its parameters (a `ParamError` naming the parameter).
"""

from __future__ import annotations

from typing import cast

import torch

from dataflex_callbacks.components.allocation import Allocator
from dataflex_callbacks.components.scorers import check_finite_scores
from dataflex_callbacks.config.fields import MixConfig, ReweightConfig, SelectConfig, StrategyConfig
from dataflex_callbacks.errors import ConfigError, ParamError
from dataflex_callbacks.mixing.domain_mixing import DomainMixing
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.registry import build_component
from dataflex_callbacks.rollout.batch import RolloutBatch

POLICY_SIGNALS = ("logprobs", "entropies")


class Part:
    """A scorer paired with its actuator (selector or reweighter), active from ``warmup_steps``."""

    def __init__(self, kind: str, config: SelectConfig | ReweightConfig) -> None:
        """Build part ``kind`` ("select" or "reweight") from its resolved config."""
        self.kind = kind
        scorer, actuator = config.scorer, getattr(config, self.actuator_kind)
        self.scorer = build_component("scorer", scorer["name"], **scorer["params"])
        self.actuator = build_component(self.actuator_kind, actuator["name"], **actuator["params"])
        self.warmup_steps = config.warmup_steps  # checked by the config step (SelectConfig, ReweightConfig)
        self._check_pairing()

    def _check_pairing(self) -> None:
        if self.scorer.granularity == "token" and self.actuator.granularity == "response":
            raise ConfigError(
                f"{self.kind}: {self.actuator_kind} {self.actuator.name!r} needs one score per response, but scorer "
                f"{self.scorer.name!r} scores tokens; use a response-level scorer"
            )
        if self.scorer.granularity == "response" and self.actuator.granularity == "token":
            raise ConfigError(
                f"{self.kind}: {self.actuator_kind} {self.actuator.name!r} needs token scores, but scorer "
                f"{self.scorer.name!r} scores responses; use token_prob or token_entropy"
            )

    def score(self, batch: RolloutBatch) -> torch.Tensor:
        """The scorer's scores of ``batch``, ``(N,)`` or ``(N, L)``;
        a `ComponentError` naming the scorer if one is not finite.

        Every score an actuator reads passes here, so the check covers built-in and user scorers alike.
        """
        scores = self.scorer.score(batch)
        check_finite_scores(scores, batch.valid_mask, f"{self.kind}: scorer {self.scorer.name!r}")
        return scores

    @property
    def actuator_kind(self) -> str:
        return "selector" if self.kind == "select" else "reweighter"

    @property
    def requires(self) -> set[str]:
        return set(self.scorer.requires) | set(getattr(self.actuator, "requires", ()))

    @property
    def needs_groups(self) -> bool:
        return bool(self.scorer.needs_groups or self.actuator.needs_groups)

    @property
    def needs_policy(self) -> bool:
        return bool(set(self.scorer.requires) & set(POLICY_SIGNALS))

    @property
    def token_level(self) -> bool:
        return self.actuator.granularity == "token"

    def active(self, step: int) -> bool:
        return step >= self.warmup_steps


def build_mixing(mix: MixConfig) -> DomainMixing:
    """The `DomainMixing` of a resolved ``mix`` part; an error names the part ("mix: ...")."""
    mixer = build_component("mixer", mix.mixer["name"], **mix.mixer["params"])
    assert isinstance(mixer, Mixer)
    try:  # the config was checked when built; binding its domains checks the prior and the mixer against them
        return DomainMixing(mixer, mix)
    except ParamError as error:
        raise ParamError(f"mix: {error}", error.param) from error
    except ValueError as error:
        raise ConfigError(f"mix: {error}") from error


def build_allocation(config: StrategyConfig) -> Allocator | None:
    """The ``allocation`` part's `Allocator` (None without one); a part it cannot compose with is refused in one line.

    Selection, reweighting, mixing and pre-rollout skipping compose with it: they act on the prompts drawn and on
    the groups it completes. ``dynamic_sampling`` does not: both decide how many completions a step generates.
    """
    spec = config.allocation
    if spec is None:
        return None
    if config.dynamic_sampling is not None:
        raise ConfigError(
            f"allocation {spec['name']!r} and dynamic_sampling cannot compose: both decide how many completions a step "
            "generates (an allocator already screens rounds until the step holds its groups); drop dynamic_sampling"
        )
    return cast(Allocator, build_component("allocation", spec["name"], **spec["params"]))  # the kind's base class
