"""Declare a host once with `register_host`: which strategy parts it runs, which allocators it can serve, its losses.

Each adapter registers one `HostDeclaration` per trainer it serves, when its package is imported
(``dataflex_callbacks/integrations/<host>/host.py``); the core declares `OWN_LOOP`, a training loop
that drives the core itself. Everything that lists hosts reads these registrations: the host x part
table of docs/architecture.md (`host_table`), the loss names of each host (`host_losses`,
`loss_aggregation`), and the packages whose frames a warning skips (`errors.user_stacklevel`).
A declaration only describes what the adapter's own checks refuse; the host kit
(`dataflex_callbacks.testing.check_host_declaration`) fails when the two disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dataflex_callbacks.components.allocation import AllocatorNeeds
from dataflex_callbacks.errors import ConfigError, add_library_packages
from dataflex_callbacks.host.contract import AGGREGATIONS, HostLosses

PARTS = ("select", "reweight", "mix", "pre_select", "dynamic_sampling", "allocation")
"""The six parts of a strategy a host may run, in the table's order."""

RUNS = "yes"
"""The adapter runs the part: the user writes the strategy, nothing else."""
YOU_DRIVE = "you drive"
"""The adapter accepts the part, and the user's training step drives it through the core
(``SignalGroupBuffer``, ``strategy.allocation_rounds``, ``Strategy.apply``)."""
REFUSED = "no"
"""The adapter refuses a strategy with the part, in one line naming the fix."""
SUPPORT = (RUNS, YOU_DRIVE, REFUSED)


@dataclass(frozen=True)
class AllocationAbilities:
    """What a host can do for an allocator, matched against the allocator's declared `AllocatorNeeds`.

    Attributes:
        unequal_groups: it trains groups of different sizes (an allocator with ``equal_groups = False``).
        reuses_responses: it stores responses and puts earlier ones back into groups (``reuses_responses = True``).
        rounds_per_step: the fixed numbers of generation rounds per step it runs (``(2,)``: a pilot and one
            commit); None: any number, varying with the rewards too.
        fewer_groups: it trains a step of fewer groups than its batch holds (an allocator with ``refills = False``,
            or a ``groups_per_step``).
    """

    unequal_groups: bool = False
    reuses_responses: bool = False
    rounds_per_step: tuple[int, ...] | None = None
    fewer_groups: bool = False

    def refusal(self, needs: AllocatorNeeds) -> str | None:
        """Why an allocator declaring ``needs`` cannot run on this host, in words; None when it can."""
        if not needs.equal_groups and not self.unequal_groups:
            return "its groups differ in size"
        if needs.reuses_responses and not self.reuses_responses:
            return "it puts earlier responses back into groups"
        if not needs.refills and not self.fewer_groups:
            return "refill: false (a step of only the groups its drawn prompts commit), where the host fills each step"
        if needs.groups_per_step is not None and not self.fewer_groups:
            return "groups_per_step (a step of fewer groups than the host's batch), where the host fills each step"
        if self.rounds_per_step is not None and needs.rounds_per_step not in self.rounds_per_step:
            rounds = needs.rounds_per_step or "a varying number of"
            return f"{rounds} rounds per step, where the host runs {' or '.join(map(str, self.rounds_per_step))}"
        return None


@dataclass(frozen=True)
class HostDeclaration:
    """One host as its adapter declares it: the parts it runs, the allocators it serves, its losses, its packages.

    Attributes:
        key: the host's key (``"trl"``, ``"verl-async"``), for `host_declaration` and `host_losses`.
        name: the host as the table and messages name it (``"TRL GRPOTrainer"``).
        parts: each of `PARTS` -> `RUNS`, `YOU_DRIVE` or `REFUSED`.
        allocation: what it can do for an allocator (`AllocationAbilities`), read when ``parts["allocation"]``
            is not refused.
        losses: its loss names (`HostLosses`), or None for a host whose loss the user writes.
        packages: the top-level modules of the host framework, whose frames a warning skips to reach the user's line.
        adapter: where the adapter lives, as the table names it (``"integrations/trl"``).
    """

    key: str
    name: str
    parts: Mapping[str, str]
    allocation: AllocationAbilities = field(default_factory=AllocationAbilities)
    losses: HostLosses | None = None
    packages: frozenset[str] = frozenset()
    adapter: str = ""

    def supports(self, part: str) -> str:
        """`RUNS`, `YOU_DRIVE` or `REFUSED`: what this host does with ``part`` (one of `PARTS`)."""
        if part not in PARTS:
            raise ConfigError(f"unknown strategy part {part!r}; choose one of {list(PARTS)}")
        return self.parts[part]

    def serves(self, needs: AllocatorNeeds) -> str:
        """`RUNS`, `YOU_DRIVE` or `REFUSED`: what this host does with an allocator declaring ``needs``."""
        support = self.parts["allocation"]
        if support == REFUSED or self.allocation.refusal(needs) is not None:
            return REFUSED
        return support


_HOSTS: dict[str, HostDeclaration] = {}
"""Every registered host, by key, in registration order."""


def register_host(declaration: HostDeclaration) -> HostDeclaration:
    """Register a host (an adapter does it once, when imported); returns ``declaration``.

    Its losses become `host_losses` (``declaration.key``) and its packages are skipped by warnings. The same
    declaration again (a re-import) is fine; a key registered with another declaration is a `ConfigError`.
    """
    if not isinstance(declaration, HostDeclaration):
        raise ConfigError(f"register_host expects a HostDeclaration; got {type(declaration).__name__}")
    missing, unknown = set(PARTS) - set(declaration.parts), set(declaration.parts) - set(PARTS)
    if missing or unknown:
        raise ConfigError(
            f"register_host({declaration.key!r}): its parts must name each of {list(PARTS)} once; missing "
            f"{sorted(missing)}, unknown {sorted(unknown)}"
        )
    bad = {part: value for part, value in declaration.parts.items() if value not in SUPPORT}
    if bad:
        raise ConfigError(f"register_host({declaration.key!r}): parts {bad}; each must be one of {list(SUPPORT)}")
    losses = declaration.losses
    if losses is not None:
        kinds = sorted({kind for kind in losses.kinds.values() if kind not in AGGREGATIONS})
        if kinds:
            raise ConfigError(
                f"register_host({declaration.key!r}): unknown aggregation kind(s) {kinds} in its losses; "
                f"choose from {list(AGGREGATIONS)}"
            )
    known = _HOSTS.setdefault(declaration.key, declaration)
    if known != declaration:
        raise ConfigError(
            f"register_host: host {declaration.key!r} is registered already ({known.name}, {known.adapter}) with "
            "another declaration; give the new host its own key"
        )
    add_library_packages(declaration.packages)
    return declaration


def registered_hosts() -> tuple[HostDeclaration, ...]:
    """Every registered host, in registration order (`OWN_LOOP` first; an adapter's once its package is imported)."""
    return tuple(_HOSTS.values())


def host_declaration(key: str) -> HostDeclaration:
    """The registered host ``key``; a `ConfigError` naming the registered ones when there is none."""
    if key not in _HOSTS:
        raise ConfigError(
            f"dataflex: no host {key!r} is registered (registered: {sorted(_HOSTS)}); its adapter registers it "
            "when imported (register_host in dataflex_callbacks/integrations/<host>/host.py)"
        )
    return _HOSTS[key]


def host_losses(key: str) -> HostLosses:
    """The loss names host ``key`` declared; a `ConfigError` naming the hosts that declare losses when it has none."""
    losses = _HOSTS[key].losses if key in _HOSTS else None
    if losses is None:
        declared = sorted(name for name, host in _HOSTS.items() if host.losses is not None)
        raise ConfigError(
            f"dataflex: no loss names registered for host {key!r} (hosts with losses: {declared}); its adapter "
            "declares them when imported (register_host(HostDeclaration(..., losses=HostLosses(...))))"
        )
    return losses


def loss_aggregation(host: str, name: str) -> str:
    """The aggregation kind of ``host``'s loss ``name`` (`host_losses`); a `ConfigError` naming the choices."""
    return host_losses(host).aggregation(name)


OWN_LOOP = register_host(
    HostDeclaration(
        key="own-loop",
        name="your own loop",
        parts=dict.fromkeys(PARTS, YOU_DRIVE),
        allocation=AllocationAbilities(unequal_groups=True, reuses_responses=True),
        adapter="the core: Strategy.apply, DomainMixingSampler, accept_from, SignalGroupBuffer, allocation_rounds",
    )
)
"""A training loop that drives the core itself (docs/extending.md, docs/allocation.md): every part, every allocator."""
