"""The components a config names: scorers, selectors, reweighters and pre-rollout selection (docs/extending.md).

Importing this package registers the built-in ones.
"""

from dataflex_callbacks.components.history import PromptHistory
from dataflex_callbacks.components.pre_select import PreSelectFilter, SkipPredictedFilter, SkipZeroVarianceFilter
from dataflex_callbacks.components.reweighters import Reweighter
from dataflex_callbacks.components.scorers import Scorer
from dataflex_callbacks.components.selectors import Selector

__all__ = [
    "PreSelectFilter",
    "PromptHistory",
    "Reweighter",
    "Scorer",
    "Selector",
    "SkipPredictedFilter",
    "SkipZeroVarianceFilter",
]
