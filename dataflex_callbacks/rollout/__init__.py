"""What a host gives a strategy and gets back: a `RolloutBatch` of signals and a `Decision`."""

from dataflex_callbacks.rollout.batch import NO_DOMAIN, RolloutBatch
from dataflex_callbacks.rollout.decision import Decision

__all__ = ["NO_DOMAIN", "Decision", "RolloutBatch"]
