"""What every conformance check shares: the error it raises, the report it fills, and the base checker.

`check_component` (conformance.py) builds one checker per component: `_batch_checks` for scorers,
selectors and reweighters, `_mixer_checks` for mixers, `_allocator_checks` for allocators.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dataflex_callbacks.registry import Component

FLOAT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
CUDA_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


class ConformanceError(AssertionError):
    """A component broke its kind's contract; the message names the check, the component and what differed."""


@dataclass
class ConformanceReport:
    """What `check_component` ran: the checks passed and the ones skipped, with the reason."""

    component: str
    kind: str
    passed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{self.kind} {self.component!r}: passed {', '.join(self.passed)}"]
        lines += [f"  skipped {check}: {reason}" for check, reason in self.skipped.items()]
        return "\n".join(lines)


class Checker:
    """Shared parts of the checks: failure messages, fresh copies of the component, the report.

    Args:
        kind: the component's kind (``scorer``, ``selector``, ``reweighter``, ``mixer``, ``allocation``).
        initial: the component in its initial state (copied for every use, never changed).
        report: the report the checks fill.
        reference: the user's per-group reference function, or None.
        seed: seeds the random batches.
        domains: the domains a mixer is bound to when it has none.
        device: the CUDA device the ``cuda`` check compares against the CPU, or None without CUDA.
    """

    def __init__(
        self,
        kind: str,
        initial: Any,
        report: ConformanceReport,
        reference: Callable[..., Any] | None,
        seed: int,
        domains: list[str],
        device: str | None,
    ) -> None:
        self.kind, self.initial, self.report, self.reference = kind, initial, report, reference
        self.seed, self.domains, self.device = seed, domains, device

    def fail(self, check: str, detail: str) -> None:
        raise ConformanceError(f"{self.kind} {self.report.component!r} failed the {check!r} check: {detail}")

    def fresh(self) -> Any:
        """The component in its initial state: every call gets its own copy, so calls never share state."""
        return copy.deepcopy(self.initial)

    def passed(self, check: str) -> None:
        self.report.passed.append(check)

    def skip(self, check: str, reason: str) -> None:
        self.report.skipped[check] = reason

    def expect_close(
        self, check: str, got: torch.Tensor, want: torch.Tensor, what: str, tolerance: dict[str, float]
    ) -> None:
        if got.shape != want.shape:
            self.fail(check, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if got.dtype == torch.bool or want.dtype == torch.bool:
            differ = got != want
        else:
            got, want = got.to(torch.float64), want.to(torch.float64)
            limit = tolerance["atol"] + tolerance["rtol"] * want.abs()
            differ = ~((got - want).abs() <= limit) & ~(got == want)  # equal infinities agree
        if bool(differ.any()):
            at = tuple(int(i) for i in torch.nonzero(differ)[0])
            self.fail(
                check,
                f"{what}: differs at {at} ({item_text(got, at)} vs {item_text(want, at)}; "
                f"{int(differ.sum())} of {differ.numel()} entries differ)",
            )


def item_text(values: torch.Tensor, at: tuple[int, ...]) -> str:
    """The entry of ``values`` at ``at`` as a failure message writes it."""
    value = values[at]
    return str(bool(value)) if value.dtype == torch.bool else f"{float(value):.6g}"


def keeps_state(component: Any) -> bool:
    """Whether ``component`` overrides `Component.state_dict` (the base class's returns ``{}``: no state)."""
    return type(component).state_dict is not Component.state_dict
