"""Which prompts a step generates: the domain-mixing sampler (through the strategy's pre-rollout filter, when it has
one), dynamic sampling's rounds, and the rounds of a rollout allocator."""

from dataflex_callbacks.components.allocation_rounds import AllocatedGroups, AllocationRounds
from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer, SignalGroups, signal_rows
from dataflex_callbacks.sampling.sampler import DomainMixingSampler

__all__ = [
    "AllocatedGroups",
    "AllocationRounds",
    "DomainMixingSampler",
    "SignalGroupBuffer",
    "SignalGroups",
    "signal_rows",
]
