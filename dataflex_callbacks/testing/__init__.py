"""Conformance checks for a user's own component (docs/extending.md) and the host kit for a new adapter
(docs/architecture.md, "Adding a host")."""

from dataflex_callbacks.testing._checker import ConformanceError, ConformanceReport
from dataflex_callbacks.testing.conformance import check_component
from dataflex_callbacks.testing.host_kit import check_host_decisions, check_host_declaration

__all__ = ["ConformanceError", "ConformanceReport", "check_component", "check_host_decisions", "check_host_declaration"]
