"""Conformance checks for a user's own component (docs/extending.md)."""

from dataflex_callbacks.testing._checker import ConformanceError, ConformanceReport
from dataflex_callbacks.testing.conformance import check_component

__all__ = ["ConformanceError", "ConformanceReport", "check_component"]
