"""Mixers: per-domain statistics (a `DomainTracker`) -> domain sampling proportions.

Every mixer computes proportions ``q`` and then guarantees its floor exactly:
``p_d = floor + (1 - K * floor) * q_d`` for K domains. (Clamping to the floor and renormalising
can leave a domain below it.) A domain never observed yet is treated as the most promising one
for the mixer's signal, so each domain gets explored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from dataflex_callbacks.config.params import check_bool, check_number
from dataflex_callbacks.config.proportions import check_domains, check_proportions
from dataflex_callbacks.errors import ComponentError, ConfigError
from dataflex_callbacks.mixing.tracker import DomainTracker
from dataflex_callbacks.registry import Component, register, register_base


def apply_floor(q: torch.Tensor, floor: float) -> torch.Tensor:
    """``floor + (1 - K * floor) * q``: every entry >= floor, still summing to 1."""
    return floor + (1.0 - q.numel() * floor) * q


def softmax_temperature(values: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax of ``values / temperature`` in float64."""
    return torch.softmax(values.to(torch.float64) / temperature, dim=0)


def fill_unobserved(values: torch.Tensor, fill: str) -> torch.Tensor:
    """Replace NaN (never observed) entries by the max or min of the observed ones (0 if none)."""
    observed = values[~torch.isnan(values)]
    if observed.numel() == 0:
        return torch.zeros_like(values)
    value = observed.max() if fill == "max" else observed.min()
    return torch.where(torch.isnan(values), value, values)


def check_raw_proportions(raw: object, mixer: str, domains: Sequence[str]) -> torch.Tensor:
    """``raw`` ``(K,)`` as a float64 tensor if its values are finite, >= 0 and not all 0, else a `ComponentError`.

    Normalising would hide a sign (all -1 become 1/K each) and spread a NaN over every domain,
    so the raw values are checked before it.
    """
    q = torch.as_tensor(raw, dtype=torch.float64)
    if q.shape != (len(domains),):
        raise ComponentError(
            f"mixer {mixer!r}: raw_proportions returned shape {tuple(q.shape)}; it must return one "
            f"value per domain, ({len(domains)},) in the order {list(domains)}"
        )
    bad = ~torch.isfinite(q) | (q < 0)
    if bool(bad.any()) or not float(q.sum()) > 0:
        values = {d: float(v) for d, v in zip(domains, q.tolist(), strict=True)}
        what = "negative or not finite" if bool(bad.any()) else "all 0"
        raise ComponentError(
            f"mixer {mixer!r}: raw_proportions returned {values}, {what}; a mixer's raw proportions "
            "must be finite, >= 0 and not all 0 (fill_unobserved gives never-observed domains a "
            "value; a softmax makes any finite value positive)"
        )
    return q


@register_base("mixer")
class Mixer(Component):
    """Base class of mixers: subclass it and implement ``raw_proportions`` (tracker -> proportions).

    The mix part calls ``proportions(tracker)`` every ``update_every`` steps; it calls
    ``raw_proportions`` and applies the floor, so a subclass implements only its rule:

    ``raw_proportions(self, tracker: DomainTracker) -> torch.Tensor``: ``(K,)`` finite values
    >= 0, not all 0, one per domain in ``self.domains`` order (which is ``tracker.domains``);
    they are normalised to sum 1 and floored (other values are refused with a `ComponentError`). The
    tracker's per-domain statistics (``mean_reward()``, ``mean_abs_advantage()``,
    ``mean_group_variance()``, ``reward_slope()``, ``total_count``) are ``(K,)`` tensors, NaN for a
    domain not observed yet (see `fill_unobserved`); the tracker already leaves non-finite rewards
    out. A domain's proportion must depend on its statistics, not on its position in the domain list.

    ``__init__`` takes ``domains: Sequence[str] | None = None`` and ``floor: float`` (plus the
    rule's own parameters, set before calling ``super().__init__(domains, floor)``, since that may
    call ``bind``). Optional: ``signal(tracker) -> {domain: value}`` for logs and
    ``starting_proportions() -> {domain: p} | None`` for the steps before the first update.
    Subclassing `SoftmaxMixer` and implementing ``value(tracker) -> (K,)`` gives
    ``softmax(value / temperature)``. The mix part checkpoints the tracker and the targets; a
    mixer that keeps its own state across updates defines ``state_dict()`` and
    ``load_state_dict(state)`` as `Scorer` says.

    Args:
        domains: the domain names, in sampling order; None lets the strategy bind the data's
            domains (the usual case in a config).
        floor: minimum proportion of every domain, >= 0, guaranteed exactly
            (``p_d = floor + (1 - K * floor) * q_d``); K domains need ``K * floor <= 1``.
    """

    name = "mixer"

    def __init__(self, domains: Sequence[str] | None = None, floor: float = 0.05) -> None:
        self.domains: list[str] | None = None
        self.floor = check_number("floor", floor, low=0.0, finite=True)
        if domains is not None:
            self.bind(domains)

    def bind(self, domains: Sequence[str]) -> None:
        """Set the domain list (done by the strategy when the data's domains become known)."""
        domains = check_domains(domains, f"mixer {self.name!r} domains")
        if len(domains) * self.floor > 1.0 + 1e-12:
            raise ConfigError(
                f"mixer {self.name!r}: floor={self.floor} times {len(domains)} domains exceeds 1; "
                f"use floor <= {1.0 / len(domains):.4f}"
            )
        self.domains = domains

    def proportions(self, tracker: DomainTracker) -> dict[str, float]:
        """Target proportions from the tracker's current statistics."""
        if self.domains is None:
            raise ConfigError(f"mixer {self.name!r} has no domains; pass domains=[...] or let the host bind them")
        if list(tracker.domains) != self.domains:
            raise ConfigError(f"mixer domains {self.domains} differ from tracker domains {tracker.domains}")
        q = check_raw_proportions(self.raw_proportions(tracker), self.name, self.domains)
        p = apply_floor(q / q.sum(), self.floor)
        return {d: float(p[i]) for i, d in enumerate(self.domains)}

    def starting_proportions(self) -> dict[str, float] | None:
        """Proportions to use before the first update (None: the mix block's prior, uniform by default)."""
        return None

    def raw_proportions(self, tracker: DomainTracker) -> torch.Tensor:  # pragma: no cover - abstract
        """``(K,)`` non-negative per-domain values in ``self.domains`` order (normalised and floored by the caller)."""
        raise NotImplementedError

    def signal(self, tracker: DomainTracker) -> dict[str, float]:
        """The per-domain value the mixer ranks domains by (for logs)."""
        return {}


@register("mixer", "static")
class StaticMixer(Mixer):
    """Fixed proportions (uniform by default): the baseline.

    Args:
        proportions: a mapping ``{domain: p}`` or a list in domain order (DataFlex-RL's form),
            summing to 1; None gives every domain the same share.
        floor: minimum proportion of every domain, >= 0, guaranteed exactly as `Mixer` says; 0
            keeps the given proportions as they are.
    """

    def __init__(
        self,
        domains: Sequence[str] | None = None,
        proportions: dict[str, float] | Sequence[float] | None = None,
        floor: float = 0.0,
    ) -> None:
        if (
            proportions is not None
            and not isinstance(proportions, Mapping)
            and (isinstance(proportions, str) or not hasattr(proportions, "__len__"))
        ):
            raise ConfigError(
                f"static mixer 'proportions' must be a mapping {{domain: p}} or a list in domain order; "
                f"got {proportions!r}"
            )
        # A list (domain order) until `bind` checks it into {domain: p}.
        self.fixed: dict[str, float] | list[float] | None = (
            None
            if proportions is None
            else (dict(proportions) if isinstance(proportions, Mapping) else list(proportions))
        )
        super().__init__(domains, floor)

    def bind(self, domains: Sequence[str]) -> None:
        super().bind(domains)
        assert self.domains is not None  # set by Mixer.bind
        if self.fixed is not None:
            self.fixed = check_proportions(self.fixed, self.domains, "static mixer 'proportions'")

    def starting_proportions(self) -> dict[str, float] | None:
        # Fixed proportions hold from the first draw, not only from the first update.
        if self.fixed is None:
            return None
        assert isinstance(self.fixed, dict), "the strategy binds the domains before the first draw"
        return dict(self.fixed)

    def raw_proportions(self, tracker: DomainTracker) -> torch.Tensor:
        assert self.domains is not None, "proportions() refuses a mixer without domains"
        k = len(self.domains)
        if self.fixed is None:
            return torch.full((k,), 1.0 / k, dtype=torch.float64)
        assert isinstance(self.fixed, dict)  # bound: checked into {domain: p}
        return torch.tensor([self.fixed[d] for d in self.domains], dtype=torch.float64)


class SoftmaxMixer(Mixer):
    """Base of the dynamic mixers: proportions ``softmax(value_d / temperature)`` of a per-domain value.

    Args:
        temperature: softmax temperature T > 0, in the units of the mixer's value: a domain
            whose value is higher by T gets e times the share (before the floor); smaller T
            concentrates the data on the top domain.
    """

    def __init__(self, domains: Sequence[str] | None = None, temperature: float = 0.1, floor: float = 0.05) -> None:
        self.temperature = check_number("temperature", temperature, low=0.0, low_open=True, finite=True)
        super().__init__(domains, floor)

    def value(self, tracker: DomainTracker) -> torch.Tensor:  # pragma: no cover - abstract
        """``(K,)`` the per-domain value the softmax ranks domains by."""
        raise NotImplementedError

    def raw_proportions(self, tracker: DomainTracker) -> torch.Tensor:
        return softmax_temperature(self.value(tracker), self.temperature)

    def signal(self, tracker: DomainTracker) -> dict[str, float]:
        assert self.domains is not None, "a mixer is bound to its domains before it is asked"
        return dict(zip(self.domains, self.value(tracker).tolist(), strict=True))


@register("mixer", "reward_gap")
class RewardGapMixer(SoftmaxMixer):
    """softmax((max_d R_d - R_d) / T): more data for domains whose reward lags.

    After DoReMi's excess-loss idea (arXiv 2305.10429).

    Args:
        temperature: softmax temperature T > 0, in reward units (the gap of a domain's windowed
            mean reward R_d to the best domain's).
    """

    def __init__(self, domains: Sequence[str] | None = None, temperature: float = 0.1, floor: float = 0.05) -> None:
        super().__init__(domains, temperature, floor)

    def value(self, tracker: DomainTracker) -> torch.Tensor:
        reward = fill_unobserved(tracker.mean_reward(), "min")
        return reward.max() - reward


@register("mixer", "dump_ucb")
class DumpUCBMixer(SoftmaxMixer):
    """softmax((U_d + c*sqrt(2 ln(N+1)/(n_d+1))) / T), U_d the windowed mean |advantage| (DUMP).

    DUMP, arXiv 2504.09710; N counts the samples seen over all domains, n_d those of domain d.

    Args:
        temperature: softmax temperature T > 0, in advantage units (the UCB value's).
        c: weight >= 0 of the UCB exploration bonus; 0 ranks domains by U_d alone.
    """

    def __init__(
        self, domains: Sequence[str] | None = None, temperature: float = 0.1, c: float = 0.1, floor: float = 0.05
    ) -> None:
        self.c = check_number("c", c, low=0.0, finite=True)
        super().__init__(domains, temperature, floor)

    def value(self, tracker: DomainTracker) -> torch.Tensor:
        mean_abs_advantage = fill_unobserved(tracker.mean_abs_advantage(), "max")
        seen = tracker.total_count
        bonus = self.c * torch.sqrt(2.0 * math.log(float(seen.sum()) + 1.0) / (seen + 1.0))
        return mean_abs_advantage + bonus


@register("mixer", "tscl")
class TSCLMixer(SoftmaxMixer):
    """softmax(|slope_d| / T) of the windowed reward slope (teacher-student curriculum).

    Teacher-Student Curriculum Learning, arXiv 1707.00183.

    Args:
        temperature: softmax temperature T > 0, in units of the slope (reward change per step).
        signed: False ranks by |slope_d| (TSCL: a domain being forgotten also gets data), True by
            max(slope_d, 0) (only improving domains).
    """

    def __init__(
        self, domains: Sequence[str] | None = None, temperature: float = 0.01, floor: float = 0.05, signed: bool = False
    ) -> None:
        self.signed = check_bool("signed", signed)
        super().__init__(domains, temperature, floor)

    def value(self, tracker: DomainTracker) -> torch.Tensor:
        slope = tracker.reward_slope()
        return slope.clamp_min(0.0) if self.signed else slope.abs()

    def signal(self, tracker: DomainTracker) -> dict[str, float]:
        assert self.domains is not None, "a mixer is bound to its domains before it is asked"
        return dict(
            zip(self.domains, tracker.reward_slope().tolist(), strict=True)
        )  # the signed slope reads better in logs


@register("mixer", "learnability")
class LearnabilityMixer(SoftmaxMixer):
    """softmax(V_d / T), V_d the windowed mean group reward variance (p(1-p) for 0/1 rewards).

    After VCRL (arXiv 2509.19803) and DADS (arXiv 2506.08672): for 0/1 rewards the variance
    peaks at mid difficulty.

    Args:
        temperature: softmax temperature T > 0, in reward-variance units (at most 0.25 for 0/1
            rewards).
    """

    def __init__(self, domains: Sequence[str] | None = None, temperature: float = 0.05, floor: float = 0.05) -> None:
        super().__init__(domains, temperature, floor)

    def value(self, tracker: DomainTracker) -> torch.Tensor:
        return fill_unobserved(tracker.mean_group_variance(), "max")
