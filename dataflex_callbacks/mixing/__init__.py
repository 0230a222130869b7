"""Domain mixing: per-domain statistics (`DomainTracker`), mixers that turn them into proportions, `DomainMixing`."""

from dataflex_callbacks.mixing.domain_mixing import DomainMixing
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.mixing.tracker import DomainTracker

__all__ = ["DomainMixing", "DomainTracker", "Mixer"]
