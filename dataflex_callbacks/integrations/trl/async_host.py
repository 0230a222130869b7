"""TRL's ``AsyncGRPOTrainer`` as a host: its class (imported on first use), the fields it provides, and the
strategies it refuses in one line."""

from __future__ import annotations

import os

from dataflex_callbacks.errors import ConfigError

from .allocation import pilot_commit_refusal


def async_trainer_class() -> type:
    """``trl.experimental.async_grpo.AsyncGRPOTrainer`` (imported on first use: TRL warns on experimental imports)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.async_grpo import AsyncGRPOTrainer

    return AsyncGRPOTrainer


def is_async_trainer(trainer) -> bool:
    """Whether ``trainer`` is a TRL ``AsyncGRPOTrainer``."""
    return isinstance(trainer, async_trainer_class())


def async_fields(domains: bool) -> set[str]:
    """The `RolloutBatch` fields this host builds for every consumed batch."""
    fields = {"rewards", "group_ids", "completion_mask", "advantages", "prompt_keys", "policy_versions"}
    return fields | ({"domains"} if domains else set())


def check_async_strategy(strategy) -> None:
    """Refuse, in one line naming the part, what cannot run on the samples an ``AsyncGRPOTrainer`` consumes."""
    host = "TRL's AsyncGRPOTrainer"
    needs = strategy.allocation_needs
    fewer = (
        (not strategy.refills_prompts, "pre_select.refill=false", "set pre_select.refill to true"),
        (needs is not None and not needs.refills, "allocation.refill=false", "set allocation.refill to true"),
        (needs is not None and needs.groups_per_step is not None, "allocation.groups_per_step", "drop it"),
    )
    for refused, what, fix in fewer:
        if refused:
            raise ConfigError(
                f"dataflex: {what} is not supported by {host}: its queue fills every step with the groups its worker "
                f"generates; {fix}, or use DataFlexGRPOTrainer"
            )
    why = (
        "the in-process worker generates a prompt's group as a pilot and one commit, and TRL's vLLM worker asks "
        "num_generations per prompt at once: neither runs stages until a pass"
    )
    refused = None if needs is None else pilot_commit_refusal(needs, why)
    if refused:
        raise ConfigError(
            f"dataflex: {refused} is not supported by {host}; use DataFlexGRPOTrainer, 'screen', or drop the part"
        )
    for part in strategy.parts:
        kind = part.actuator_kind
        if part.token_level:
            raise ConfigError(
                f"dataflex: {part.kind}: {kind} {part.actuator.name!r} works on tokens, but {host} packs one "
                f"advantage per sample into its loss; use a response-level {part.kind} part under the async trainer"
            )
        if part.needs_policy:
            raise ConfigError(
                f"dataflex: {part.kind}: scorer {part.scorer.name!r} reads the current policy's log-probs or entropies "
                f"inside the loss, which {host} does not expose; "
                "use a scorer of rollout signals under the async trainer"
            )
