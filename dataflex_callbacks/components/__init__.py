"""The components a config names: scorers, selectors, reweighters, pre-rollout selection and rollout allocation
(docs/extending.md, docs/allocation.md).

Importing this package registers the built-in ones.
"""

from dataflex_callbacks.components.allocation import Allocator, ScreenAllocator
from dataflex_callbacks.components.allocation_adaptive import AdaptiveAllocator
from dataflex_callbacks.components.allocation_knapsack import KnapsackAllocator
from dataflex_callbacks.components.history import PromptHistory
from dataflex_callbacks.components.pre_select import PreSelectFilter, SkipPredictedFilter, SkipZeroVarianceFilter
from dataflex_callbacks.components.reweighters import Reweighter
from dataflex_callbacks.components.scorers import Scorer
from dataflex_callbacks.components.selectors import Selector

__all__ = [
    "AdaptiveAllocator",
    "Allocator",
    "KnapsackAllocator",
    "PreSelectFilter",
    "PromptHistory",
    "Reweighter",
    "ScreenAllocator",
    "Scorer",
    "Selector",
    "SkipPredictedFilter",
    "SkipZeroVarianceFilter",
]
