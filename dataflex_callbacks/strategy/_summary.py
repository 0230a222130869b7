"""The one console line a host prints when training starts (`summary_line`), and a component's text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def component_text(spec: Mapping[str, Any]) -> str:
    """``name(param=value, ...)`` of a resolved component spec, ``name`` alone without parameters."""
    params = ", ".join(
        f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}" for key, value in spec["params"].items()
    )
    return f"{spec['name']}({params})" if params else spec["name"]


def summary_line(strategy: Any, domains: Sequence[str] | None = None, domain_key: str | None = None) -> str:
    """The one console line a host prints when training starts: the strategy, its parts and the domains seen.

    A pre-rollout filter that has not skipped a prompt yet is said to be warming up: its
    ``pre_select/*`` metrics read 0 until it first skips, which is expected, not a fault.

    Args:
        domains: the domain labels of the host's data; empty: the data has none; None: not known
            before the first batch (a stream, or batches the user's own code builds).
        domain_key: the column the host reads domains from, named in the line so a user sees which
            column was read, or that the data has none (then every prompt is in one pool).
    """
    parts = []
    for part in strategy.parts:
        config = getattr(strategy.config, part.kind)
        text = f"{part.kind} {component_text(config.scorer)} -> {component_text(getattr(config, part.actuator_kind))}"
        if part.warmup_steps:
            text += f" from step {part.warmup_steps}"
        parts.append(text)
    if strategy.mixing is not None:
        mix = strategy.config.mix
        parts.append(
            f"mix {component_text(mix.mixer)} (target proportions fixed for the first "
            f"{mix.warmup_steps} steps, then updated every {mix.update_every})"
        )
    if strategy.config.dynamic_sampling is not None:
        parts.append(f"dynamic_sampling(max_rounds={strategy.config.dynamic_sampling.max_rounds})")
    if strategy.config.allocation is not None:
        parts.append(f"allocation {component_text(strategy.config.allocation)}")
    if strategy.pre_select is not None:
        text = f"pre_select {component_text(strategy.config.pre_select)}"
        if strategy.pre_select.skipped:
            text += f" (acting: {strategy.pre_select.skipped} prompts skipped so far)"
        else:
            text += (
                " (warming up: it skips a prompt only once the run's groups predict it gives no signal, "
                "so its pre_select/* metrics read 0 until it first skips)"
            )
        parts.append(text)
    column = "" if domain_key is None else f" (column {domain_key!r})"
    if domains is None:
        seen = f"domains{column}: not known before the first batch"
    elif not domains:
        none = "one pool of prompts" if domain_key is None else f"no {domain_key!r} column: one pool of prompts"
        seen = f"domains: none ({none})"
    else:
        seen = f"domains{column}: " + ", ".join(sorted({str(domain) for domain in domains}))
    return f"dataflex: strategy {strategy.name!r}: {'; '.join(parts) or 'no parts (plain training)'}; {seen}"
