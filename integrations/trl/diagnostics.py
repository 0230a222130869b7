"""`dropped_all_message`: the one-time warning when a strategy drops every response of a generation batch.

A step whose strategy drops everything trains nothing (loss and gradient 0, ``dataflex/dropped_all``
= 1). One such step can be chance; every step like it is a run that silently does nothing, most
often because a solve-rate band reads rewards that are not 0/1. The adapter warns at the first
such step with the fix, instead of leaving it to a metric nobody looks at.
"""

from __future__ import annotations

import torch

SOLVE_RATE_SCORERS = ("group_solve_rate",)


def dropped_all_message(strategy, step: int, batch) -> str:
    """Say what was dropped, what the rewards looked like, and what to change.

    Args:
        strategy: the `Strategy` that made the decision.
        step: the trainer's global step.
        batch: the global `RolloutBatch` (``rewards`` ``(N,)``).
    """
    rewards = batch.rewards.detach().float()
    finite = rewards[torch.isfinite(rewards)]
    if finite.numel():
        values = torch.unique(finite)
        spread = f"rewards from {finite.min().item():.4g} to {finite.max().item():.4g}, {values.numel()} distinct values"
        binary = bool(((values == 0) | (values == 1)).all())
    else:
        spread, binary = "no finite reward", True
    select = getattr(strategy, "select", None)
    scorer = None if select is None else select.scorer.name
    if scorer in SOLVE_RATE_SCORERS and not binary:
        fix = ("the rewards are not 0/1, and a solve-rate band counts a response as solved when its reward is above "
               "the scorer's threshold (default 0.5), so every group looks all-solved or all-failed. Pass "
               "selection_reward=<a 0/1 reward function>, set the scorer's threshold for this reward scale, or "
               "select on the reward spread instead (scorer group_reward_variance with threshold_band(0, inf))")
    elif scorer in SOLVE_RATE_SCORERS:
        fix = ("the rewards are 0/1 and no group's solve rate fell inside the selector's band; if this repeats, the "
               "prompts are all too easy or too hard for the model, or the band is too narrow for the group size: "
               "widen threshold_band(low, high), raise num_generations, or use diffband (drops only all-equal groups)")
    elif scorer is not None:
        fix = (f"check that the selector of scorer {scorer!r} can keep anything on this reward scale, or pass "
               "selection_reward=<the reward function to select on>")
    else:
        fix = "non-finite rewards are dropped under nan_policy='drop': check the reward functions"
    return (f"dataflex: step {step}: strategy {strategy.name!r} dropped every one of the {batch.n} responses ({spread}), "
            f"so this step trains nothing (dataflex/dropped_all=1); if this repeats, nothing trains. Likely fix: {fix}. "
            "This warning is shown once per run.")
