"""Why a step kept nothing: the cause, what happened and the fix that a `DroppedAllWarning` names.

Runs only on a step that kept nothing; a fix is named only where a setting or the code can change the outcome.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_callbacks.config.fields import DynamicSamplingConfig
from dataflex_callbacks.errors import SELECTION_REWARD_TEXT
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.rollout.groups import every_group_equal


def dropped_all_reason(
    part: Any,
    dynamic_sampling: DynamicSamplingConfig | None,
    n_bad: int,
    batch: RolloutBatch,
    counts: dict,
    token_level: bool,
    selection_reward: str = SELECTION_REWARD_TEXT,
) -> tuple[str, str, str | None]:
    """``(cause, what happened, fix or None)`` for a step that kept nothing; runs only on such a step.

    ``part``: the strategy's select part (None without one); ``dynamic_sampling``: its
    ``dynamic_sampling`` part (None without one); ``n_bad``: rows left out for a non-finite
    signal; ``selection_reward``: how the fix names the reward the strategy selects on (the host's
    setting, when the host named it: `Strategy.bind_selection_reward`). Scores are never the cause: a
    scorer's non-finite scores stop the step first (`Part.score`). A fix is given only where a
    setting or the code can change the outcome.
    """
    n, rewards = batch.n, batch.rewards
    if n_bad == n:
        signals = ", ".join(k[len("nonfinite_") :] for k, v in counts.items() if v)
        return (
            "nonfinite_signals",
            f"left out all {n} responses because each has a NaN or infinite value ({signals}) and nan_policy='drop'",
            "correct the signal's computation, or set nan_policy: zero to count such values as 0",
        )
    finite = rewards[torch.isfinite(rewards)].float()
    if finite.numel():
        values = torch.unique(finite)
        spread = (
            f"rewards from {finite.min().item():.4g} to {finite.max().item():.4g}, {values.numel()} distinct values"
        )
        binary = bool(((values == 0) | (values == 1)).all())
    else:
        spread, binary = "no finite reward", True
    if part is None:
        return (
            "selector",
            f"left out all {n} responses ({spread}); the step trains nothing (metric dropped_all=1)",
            None,
        )
    kept_none = f"kept no {'token' if token_level else 'response'} of {n} ({spread})"
    by = f"selector {part.actuator.name!r} on scorer {part.scorer.name!r}"
    if (
        batch.group_ids is not None
        and "rewards" in part.scorer.requires
        and every_group_equal(rewards, batch.group_ids)
    ):
        searched = (
            ""
            if dynamic_sampling is None
            else f" (dynamic sampling's {dynamic_sampling.max_rounds} generation rounds found none either)"
        )
        return (
            "equal_rewards",
            f"{kept_none}: within every group the responses had equal rewards, so no group carries a learning "
            f"signal{searched} and {by} dropped them all, as it is meant to. The step trains nothing (metric "
            "dropped_all=1); now and then that is expected. It matters if it repeats or happens at every step: "
            "then the model solves every prompt or fails every one, or the reward gives every completion one "
            "value",
            None,
        )
    fix = (
        f"check that the selector's band or fraction fits the scale of the scorer's values, or choose "
        f"{selection_reward} that fits them"
    )
    cause = "selector"
    if part.scorer.name == "group_solve_rate" and not binary:
        cause = "reward_scale"
        fix = (
            f"the rewards are not 0/1 and the solve rate counts rewards above the scorer's threshold "
            f"({part.scorer.threshold:g}) as solved, so every group looks all-solved or all-failed: set "
            f"success_threshold= for this reward scale, choose a 0/1 reward as {selection_reward}, "
            "or use diffband (group_reward_variance with threshold_band(0, inf))"
        )
    elif part.scorer.name == "group_solve_rate":
        cause = "band"
        fix = (
            "the rewards are 0/1 and no group's solve rate fell inside the band; if this repeats, the prompts "
            "are all too easy or too hard for the model, or the band is too narrow for the group size: widen "
            "threshold_band(low, high), generate more completions per prompt, or use diffband (drops only "
            "all-equal groups)"
        )
    return cause, f"{kept_none}: {by} dropped them all", fix
