"""`DomainMixing`: the mix part of a strategy: tracker + mixer + update schedule + what was drawn.

Target proportions start at a static prior; from ``warmup_steps`` on they are recomputed by the
mixer every ``update_every`` steps from the `DomainTracker` (optionally smoothed:
``p <- smoothing * p_old + (1 - smoothing) * p_new``, which keeps every floor). Both the target and
the proportions actually drawn by the sampler are kept for logging. ``window_unit`` says what the
tracker's window counts: steps (default) or response rows (DataFlex-RL's meaning).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from dataflex_callbacks.config.fields import MixConfig
from dataflex_callbacks.config.proportions import check_domains, check_proportions
from dataflex_callbacks.errors import ConfigError, StateError, check_argument, check_state
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.mixing.tracker import DomainTracker
from dataflex_callbacks.rollout.batch import RolloutBatch

RECENT_DRAWS = 20  # sampler batches in the "recent" actual-proportion window


class DomainMixing:
    """Schedule that turns tracked per-domain statistics into target sampling proportions.

    Args:
        mixer: the built `Mixer` (``build_component("mixer", name, **params)``), the one ``config.mixer`` names.
        config: the mix part's settings, a `MixConfig` (checked when it was built; their help and defaults
            live there). ``quota`` is the sampler's; ``domains``, when given, are bound now.
    """

    def __init__(self, mixer: Mixer, config: MixConfig) -> None:
        if not isinstance(mixer, Mixer):
            raise ConfigError(
                f"DomainMixing needs a Mixer (e.g. build_component('mixer', 'reward_gap')); got {mixer!r}"
            )
        check_argument(
            config,
            MixConfig,
            "config",
            "DomainMixing",
            "the mix part's MixConfig",
            "Pass MixConfig(mixer=..., domains=..., ...), or build a strategy with a 'mix' part",
        )
        self.mixer = mixer
        self.window = config.window
        self.window_unit = config.window_unit
        self.warmup_steps = config.warmup_steps
        self.update_every = config.update_every
        self.smoothing = float(config.smoothing)
        self.prior_config = config.prior
        self.domains: list[str] | None = None
        self.tracker: DomainTracker | None = None
        self.target: dict[str, float] | None = None
        self.last_update_step: int | None = None
        self.drawn_total: dict[str, int] = {}
        self.drawn_recent: deque = deque(maxlen=RECENT_DRAWS)
        if config.domains is not None:
            self.bind(config.domains)

    @property
    def bound(self) -> bool:
        return self.domains is not None

    def bind(self, domains: Sequence[str]) -> None:
        """Fix the domain list (from the config, or from the dataset's domain column)."""
        domains = check_domains(domains, "mix domains")
        if self.domains is not None:
            if domains != self.domains:
                raise ConfigError(f"mix domains are already {self.domains}; cannot rebind to {domains}")
            return
        self.mixer.bind(domains)
        self.domains = domains
        self.tracker = DomainTracker(domains, self.window, self.window_unit)
        if self.prior_config is None:
            prior = self.mixer.starting_proportions() or {d: 1.0 / len(domains) for d in domains}
        else:
            prior = check_proportions(self.prior_config, domains, "mix 'prior'")
        floor = self.mixer.floor
        # The prior obeys the floor too, exactly as the mixers do.
        self.prior = {d: floor + (1.0 - len(domains) * floor) * p for d, p in prior.items()}
        self.target = dict(self.prior)
        self.drawn_total = {d: 0 for d in domains}

    def _bound(self) -> tuple[list[str], DomainTracker, dict[str, float]]:
        """The bound domains, tracker and target (`bind` sets the three together); a `ConfigError` before."""
        if self.domains is None or self.tracker is None or self.target is None:
            raise ConfigError(
                "the strategy mixes domains but no domains are known; give mix.domains in the config, or let the "
                "host adapter bind them from the dataset's domain column (strategy.bind_domains([...]))"
            )
        return self.domains, self.tracker, self.target

    def observe(self, batch: RolloutBatch, step: int, sync: bool = True) -> bool:
        """Feed one batch; returns True when the target proportions were recomputed at this step."""
        domains, tracker, target = self._bound()
        tracker.update(batch, step=step, sync=sync)
        # Due at warmup_steps, then once update_every steps have passed since the last update: a
        # host that calls at strided steps (one call per generation round) still gets updates.
        if step < self.warmup_steps:
            return False
        if self.last_update_step is not None and step < self.last_update_step + self.update_every:
            return False
        fresh = self.mixer.proportions(tracker)
        if self.smoothing > 0:
            fresh = {d: self.smoothing * target[d] + (1 - self.smoothing) * fresh[d] for d in domains}
        self.target = fresh
        self.last_update_step = int(step)
        return True

    def observe_sampled(self, counts: Mapping[str, int]) -> None:
        """Record how many prompts of each domain the sampler actually drew (the ``mix/actual/<d>`` metrics)."""
        domains, _, _ = self._bound()
        unknown = sorted(set(counts) - set(domains))
        if unknown:
            raise ConfigError(f"drawn counts name unknown domain(s) {unknown}; known: {domains}")
        for d, c in counts.items():
            self.drawn_total[d] += int(c)
        self.drawn_recent.append({d: int(counts.get(d, 0)) for d in domains})

    def actual(self, recent: bool = False) -> dict[str, float]:
        """Share of each domain among drawn prompts (overall, or over the last few sampler batches)."""
        domains, _, _ = self._bound()
        if recent:
            totals = {d: sum(c[d] for c in self.drawn_recent) for d in domains}
        else:
            totals = self.drawn_total
        n = sum(totals.values())
        return {d: (totals[d] / n if n else 0.0) for d in domains}

    def metrics(self) -> dict[str, float]:
        """``mix/target/<d>``, ``mix/actual/<d>`` (recent draws) and ``mix/signal/<d>``; empty before `bind`."""
        if self.domains is None:
            return {}
        _, tracker, target = self._bound()
        out = {f"mix/target/{d}": p for d, p in target.items()}
        if sum(self.drawn_total.values()):
            out.update({f"mix/actual/{d}": p for d, p in self.actual(recent=True).items()})
        if tracker.updates:
            out.update({f"mix/signal/{d}": float(v) for d, v in self.mixer.signal(tracker).items()})
        return out

    def state_dict(self) -> dict:
        """A copy of the schedule state: tensors, Python scalars, strings and lists/dicts of them only."""
        return {
            "domains": None if self.domains is None else list(self.domains),
            "target": None if self.target is None else {d: float(p) for d, p in self.target.items()},
            "last_update_step": None if self.last_update_step is None else int(self.last_update_step),
            "tracker": None if self.tracker is None else self.tracker.state_dict(),
            "drawn_total": {d: int(c) for d, c in self.drawn_total.items()},
            "drawn_recent": [{d: int(c) for d, c in draw.items()} for draw in self.drawn_recent],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output; the domains must match those already bound (if any)."""
        check_state(
            state, ("domains", "target", "last_update_step", "tracker", "drawn_total", "drawn_recent"), "DomainMixing"
        )
        if state["domains"] is None:
            return
        domains = check_domains(state["domains"], "saved mix domains")
        target, drawn_total = state["target"], state["drawn_total"]
        if not isinstance(target, Mapping) or sorted(target) != sorted(domains):
            raise StateError(f"DomainMixing state: 'target' must map each of {domains} to a proportion; got {target!r}")
        if not isinstance(drawn_total, Mapping) or sorted(drawn_total) != sorted(domains):
            raise StateError(
                f"DomainMixing state: 'drawn_total' must map each of {domains} to a count; got {drawn_total!r}"
            )
        if not isinstance(state["drawn_recent"], (list, tuple)) or not all(
            isinstance(d, Mapping) for d in state["drawn_recent"]
        ):
            raise StateError(
                f"DomainMixing state: 'drawn_recent' must be a list of {{domain: count}} dicts; "
                f"got {state['drawn_recent']!r}"
            )
        self.bind(domains)
        _, tracker, _ = self._bound()
        tracker.load_state_dict(state["tracker"])
        self.target = {d: float(target[d]) for d in domains}
        self.last_update_step = None if state["last_update_step"] is None else int(state["last_update_step"])
        self.drawn_total = {d: int(drawn_total[d]) for d in domains}
        self.drawn_recent = deque(
            ({d: int(c) for d, c in draw.items()} for draw in state["drawn_recent"]), maxlen=RECENT_DRAWS
        )
