"""Which prompts a step generates: the domain-mixing sampler, pre-rollout acceptance, and dynamic sampling's rounds."""

from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer, SignalGroups, signal_rows
from dataflex_callbacks.sampling.sampler import DomainMixingSampler

__all__ = ["DomainMixingSampler", "SignalGroupBuffer", "SignalGroups", "signal_rows"]
