"""Conformance checks for strategy components: run your scorer, selector, reweighter, mixer or allocator through
`check_component`.

``check_component`` feeds a component random batches (unequal, interleaved groups, variable
lengths, NaN and infinite signals cleaned as a strategy's ``nan_policy`` cleans them) and
checks the contract its base class documents:

* ``declarations``: it subclasses its kind's base class and declares valid ``granularity``,
  ``scope`` and ``requires``;
* ``raw values``: a reweighter's ``_raw`` weights (inside the mask) and a mixer's
  ``raw_proportions`` are finite and >= 0 (proportions not all 0): the normalisation that follows
  only rescales them and cannot repair a sign (proportions of -1 would read as 1/K each);
* ``output contract``: shape, dtype and device of the result, inputs left unchanged, weights
  >= 0, 0 outside the mask and normalised as ``normalize`` says, proportions over exactly the
  domains, above the floor, summing to 1;
* ``non-finite inputs``: NaN/inf signals, once cleaned, never give NaN/inf scores, weights or
  proportions;
* ``group loop``: with ``scope`` ``"row"`` or ``"group"``, the vectorised call on the whole batch
  equals the component run on one group (``"row"``: one row) at a time (a reweighter's weights
  are compared as shares of their group: normalisation rescales them); with ``"batch"``,
  shuffling the rows shuffles the result; a mixer gives each domain the same proportion
  whatever the order of the domain list;
* ``reference``: equality with ``reference``, a plain function the user writes per group;
* ``cuda``: the same result on CUDA as on the CPU (skipped, and said so, without CUDA);
* ``state_dict``: a second instance loading the first's state gives the same results (skipped
  for stateless components).

A rollout allocator (kind ``allocation``) is driven through a host's rounds instead (`_allocator_checks`: its
answers' contract, its counts of generated completions, per prompt as in the batch, CUDA, state).

A failure raises `ConformanceError` (an ``AssertionError``) naming the check and the component.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from dataflex_callbacks.components.allocation import Allocator
from dataflex_callbacks.components.reweighters import Reweighter
from dataflex_callbacks.components.scorers import Scorer
from dataflex_callbacks.components.selectors import Selector
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.registry import KINDS, component_class
from dataflex_callbacks.testing._allocator_checks import AllocatorChecks
from dataflex_callbacks.testing._batch_checks import BatchChecker
from dataflex_callbacks.testing._checker import Checker, ConformanceError, ConformanceReport
from dataflex_callbacks.testing._mixer_checks import MixerChecker
from dataflex_callbacks.testing._random_batches import (
    batch_rows,
    batch_to,
    cleaned_signals,
    drop_policy_batch,
    random_batch,
)

__all__ = [
    "check_component",
    "cuda_device",
    "random_batch",
    "batch_rows",
    "batch_to",
    "cleaned_signals",
    "drop_policy_batch",
]

BASES = {"scorer": Scorer, "selector": Selector, "reweighter": Reweighter, "mixer": Mixer, "allocation": Allocator}


def cuda_device() -> str | None:
    """The device the ``cuda`` check compares against the CPU: ``"cuda"``, or None without CUDA."""
    return "cuda" if torch.cuda.is_available() else None


def check_component(
    component: Any,
    kind: str | None = None,
    params: Mapping[str, Any] | None = None,
    reference: Callable[..., Any] | None = None,
    *,
    seed: int = 0,
    domains: Sequence[str] = ("math", "code", "chat"),
) -> ConformanceReport:
    """Run a component through every conformance check of its kind; raise `ConformanceError` on the first failure.

    Args:
        component: a component class, an instance, or a registered name (then ``kind`` is needed).
        kind: ``scorer``, ``selector``, ``reweighter``, ``mixer`` or ``allocation``; inferred from the base class.
        params: constructor parameters when ``component`` is a class or a name.
        reference: a plain per-group function, called like the component on each part the group
            loop runs alone (a group; a row for a row-scope scorer or selector; the whole batch for
            ``scope="batch"``) and compared with the component's result there:
            ``reference(batch) -> scores`` for a scorer, ``reference(scores, batch) -> keep`` for a
            selector, ``reference(scores, batch, mask) -> weights`` for a reweighter and
            ``reference(tracker) -> {domain: p}`` for a mixer; none for an allocator.
        seed: seeds the random batches.
        domains: the domains a mixer is bound to when it has none.

    Returns:
        A `ConformanceReport` of the checks passed and skipped (CUDA without a GPU, state for a
        stateless component).
    """
    kind, initial = _build(component, kind, dict(params or {}))
    device = cuda_device()
    report = ConformanceReport(component=str(getattr(initial, "name", type(initial).__name__)), kind=kind)
    if kind == "allocation":
        if reference is not None:
            raise ConfigError("check_component has no reference= check for an allocator; drop reference=")
        shared = Checker(kind, initial, report, None, seed, list(domains), device)
        AllocatorChecks(initial, shared.fail, shared.passed, shared.skip, seed, device).run()
        return report
    checker = MixerChecker if kind == "mixer" else BatchChecker
    checker(kind, initial, report, reference, seed, list(domains), device).run()
    return report


def _build(component: Any, kind: str | None, params: dict[str, Any]) -> tuple[str, Any]:
    """The component's kind and an instance of it in its initial state."""
    if isinstance(component, str):
        if kind is None:
            raise ConfigError(f"check_component({component!r}) names a component: pass kind= too")
        component = component_class(kind, component)
    cls = component if isinstance(component, type) else type(component)
    if kind is None:
        kind = next((k for k, base in BASES.items() if issubclass(cls, base)), None)
        if kind is None:
            raise ConformanceError(
                f"{cls.__name__} failed the 'declarations' check: it subclasses none of "
                f"{', '.join(b.__name__ for b in BASES.values())}; subclass the base of its kind"
            )
    if kind not in BASES:
        raise ConfigError(
            f"check_component checks kinds {', '.join(BASES)}; got {kind!r} (known kinds: {', '.join(KINDS)})"
        )
    if not issubclass(cls, BASES[kind]):
        raise ConformanceError(
            f"{kind} {cls.__name__} failed the 'declarations' check: it does not subclass "
            f"{BASES[kind].__name__}; write 'class {cls.__name__}(dataflex_callbacks.{BASES[kind].__name__})'"
        )
    if isinstance(component, type):
        return kind, component(**params)
    if params:
        raise ConfigError(
            "check_component got an instance and params=; pass the class with params, or the instance alone"
        )
    return kind, copy.deepcopy(component)
