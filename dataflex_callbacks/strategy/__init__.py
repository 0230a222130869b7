"""A `Strategy`: the parts of a config composed into one decision per batch."""

from dataflex_callbacks.rollout.decision import Decision
from dataflex_callbacks.strategy.strategy import Strategy, build_strategy

__all__ = ["Decision", "Strategy", "build_strategy"]
