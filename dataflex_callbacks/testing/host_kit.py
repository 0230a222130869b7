"""The host kit: the checks every host adapter must pass, runnable against a new adapter (docs/architecture.md,
"Adding a host").

* `check_host_declaration`: the adapter's own check (``accepts``, a function that raises a `DataFlexError` for a
  strategy the host refuses) accepts exactly the parts and allocators its `HostDeclaration` declares: one strategy
  per part (`PART_STRATEGIES`) and one per built-in allocator.
* `check_host_decisions`: the adapter's driver (``driver(strategy, batch, step) -> (N, L)`` token loss weights, 0
  where a token is out of the loss) trains on what the core decides: the same tokens, with weights proportional
  to the decision's (a row-normalised loss may rescale them all by one factor), for `DECISION_STRATEGIES`.

Both raise `ConformanceError` naming the check, the host and every cell or step that differed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from dataflex_callbacks.errors import DataFlexError
from dataflex_callbacks.host.contract import decide, kept_token_mask
from dataflex_callbacks.host.declarations import PARTS, REFUSED, HostDeclaration
from dataflex_callbacks.host.table import builtin_allocators
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.strategy.strategy import Strategy, build_strategy
from dataflex_callbacks.testing._checker import ConformanceError
from dataflex_callbacks.testing._random_batches import random_batch

PART_STRATEGIES: dict[str, Any] = {
    "select": "difffilter",
    "reweight": "per",
    "mix": "static",
    "pre_select": "greso",
    "dynamic_sampling": "dapo",
    "allocation": "screen",
}
"""The strategy `check_host_declaration` builds for each part (a preset name): the part alone, or with the select
part it needs (``dapo``)."""

DECISION_STRATEGIES = ("baseline", "difffilter", "per", "entropy_top")
"""The strategies `check_host_decisions` runs: none, a group select, a response reweight, a token select."""


def declared_cases() -> list[tuple[str, Any]]:
    """``(column, strategy config)`` for every column of the host x part table: each part, then each allocator."""
    cases = [(part, PART_STRATEGIES[part]) for part in PARTS]
    for needs in builtin_allocators():
        cases.append((f"allocation: {needs.name}", {"allocation": {"name": needs.name, "params": {}}}))
    return cases


def check_host_declaration(declaration: HostDeclaration, accepts: Callable[[Strategy], Any]) -> dict[str, bool]:
    """Check that ``accepts`` (the adapter's own check) accepts exactly what ``declaration`` declares.

    Args:
        declaration: the host's registered `HostDeclaration`.
        accepts: called with a freshly built `Strategy`; it raises a `DataFlexError` when the host refuses it (the
            adapter's check on the strategy alone, or on a small real module or config), and returns otherwise.

    Returns:
        Every table column -> whether ``accepts`` accepted its strategy.

    Raises:
        ConformanceError: a column the declaration marks refused was accepted, or the reverse; each is named with
            the adapter's refusal.
    """
    needs_by_column = {f"allocation: {needs.name}": needs for needs in builtin_allocators()}
    accepted, wrong = {}, []
    for column, config in declared_cases():
        try:
            accepts(build_strategy(config))
            accepted[column], refusal = True, ""
        except DataFlexError as error:
            accepted[column], refusal = False, f" (it refused: {error})"
        needs = needs_by_column.get(column)
        declared = declaration.serves(needs) if needs is not None else declaration.supports(column)
        if accepted[column] != (declared != REFUSED):
            wrong.append(f"{column}: declared {declared!r}, the adapter {'accepts' if accepted[column] else 'refuses'}")
            wrong[-1] += refusal
    if wrong:
        raise ConformanceError(
            f"host kit, declaration: host {declaration.key!r} ({declaration.name}) declares what its adapter does not "
            "do; change the HostDeclaration in its host.py (or the adapter's check), then regenerate the table "
            "(python -m dataflex_callbacks.integrations.hosts --write docs/architecture.md):\n  " + "\n  ".join(wrong)
        )
    return accepted


def kit_batch(seed: int) -> RolloutBatch:
    """A random `RolloutBatch` of interleaved groups of 1 to 6 rows, token advantages, every row with a token."""
    batch = random_batch(seed, token_advantages=True)
    assert batch.completion_mask is not None  # random_batch gives every field
    mask = batch.completion_mask.clone()
    mask[:, 0] = True  # a host's row always holds a response token (verl keeps the reward on one)
    return batch.replace(completion_mask=mask)


def check_host_decisions(
    host: str,
    driver: Callable[[Strategy, RolloutBatch, int], torch.Tensor],
    strategies: Iterable[str] = DECISION_STRATEGIES,
    seeds: Iterable[int] = range(3),
) -> None:
    """Check that ``driver`` puts in the loss what the core decides for each strategy and seed (`kit_batch`).

    Args:
        host: the host's key, as messages name it.
        driver: runs the adapter's own path on the batch (its conversion from the host's fields, its call to
            `decide`, its loss fields) and returns ``(N, L)`` token loss weights: 0 where a token is out of the
            loss. Called with a fresh strategy per case.
        strategies: preset names; ``seeds``: the batches.

    Raises:
        ConformanceError: the tokens differ from the core's, or the weights are not one multiple of its.
    """
    wrong = []
    for name in strategies:
        for seed in seeds:
            batch = kit_batch(seed)
            decision = decide(build_strategy(name), batch, step=seed, warn=False)
            valid = batch.completion_mask
            assert valid is not None  # kit_batch gives every field
            weights = decision.weights if decision.weights.dim() == 2 else decision.weights.unsqueeze(1)
            expected = (weights * kept_token_mask(decision, valid)).expand(valid.shape).float()
            got = torch.as_tensor(driver(build_strategy(name), batch, seed)).float() * valid
            if got.shape != expected.shape:
                wrong.append(f"{name}, seed {seed}: weights of shape {tuple(got.shape)}, not {tuple(expected.shape)}")
            elif not torch.equal(got > 0, expected > 0):
                wrong.append(
                    f"{name}, seed {seed}: {int(((got > 0) != (expected > 0)).sum())} tokens in or out wrongly"
                )
            elif expected.sum() > 0 and not torch.allclose(got * expected.sum() / got.sum(), expected, atol=1e-5):
                wrong.append(f"{name}, seed {seed}: weights not proportional to the decision's")
    if wrong:
        raise ConformanceError(
            f"host kit, decisions: host {host!r} trains on something else than the core's decision:\n  "
            + "\n  ".join(wrong)
        )
