"""Which prompts a step generates: the domain-mixing sampler, pre-rollout acceptance, dynamic sampling's rounds,
and the rounds of a rollout allocator."""

from dataflex_callbacks.sampling.allocation_rounds import AllocatedGroups, AllocationRounds
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
