"""Build `RolloutBatch`es from the tensors TRL's GRPOTrainer (or RLOOTrainer) already has.

TRL gathers the rewards of every process in ``_calculate_rewards`` (``(N_global, F)``, one
column per reward function, rank-major order) and lays groups out as contiguous blocks of
``num_generations`` rows in that global order, so a group can span processes. The per-token
tensors stay local; `global_rollout_batch` gathers them so that every rank builds the same
batch and the strategy reaches the same decision everywhere. Prompt keys are the ones the
mixing sampler draws by (`sampling.row_key`), gathered as Python objects.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from dataflex_callbacks import RolloutBatch
from dataflex_callbacks.errors import ConfigError


def resolve_reward_index(reward_name: str | None, reward_func_names: Sequence[str]) -> int | None:
    """Index of the reward function named ``reward_name`` (None: use the weighted sum of all of them).

    Raises:
        ValueError: the name is not one of the trainer's reward functions; the message lists them.
    """
    if reward_name is None:
        return None
    names = list(reward_func_names)
    if reward_name not in names:
        raise ConfigError(
            f"dataflex: selection_reward={reward_name!r} is not one of this trainer's reward functions {names}. "
            "Pass one of these names, or selection_reward=None to select on the weighted sum of all rewards."
        )
    return names.index(reward_name)


def selection_reward_text(reward_name: str | None, reward_func_names: Sequence[str], reward_weights: Any) -> str:
    """The reward the strategy selects on, in words, for the train-start line.

    Args:
        reward_name: the ``selection_reward`` option (None: TRL's weighted sum of every reward function).
        reward_func_names: the trainer's ``reward_func_names``.
        reward_weights: ``(F,)`` the trainer's ``reward_weights`` (a tensor or a sequence of floats).
    """
    names = list(reward_func_names)
    if reward_name is not None:
        return f"reward function {reward_name!r} (selection_reward={reward_name!r})"
    weights = [float(w) for w in (reward_weights.tolist() if hasattr(reward_weights, "tolist") else reward_weights)]
    if len(names) == 1 and weights == [1.0]:
        return f"reward function {names[0]!r} (the trainer's only one)"
    terms = " + ".join(f"{weight:g} * {name}" for weight, name in zip(weights, names, strict=True))
    return (
        f"the weighted sum of the reward functions {terms} (TRL's reward_weights; selection_reward=<name> "
        "selects on one)"
    )


def longest_prompt_tokens(trainer, prompts: Sequence[Any]) -> int | None:
    """Tokens of the longest of ``prompts`` as TRL's ``trainer`` tokenizes them for generation.

    Text prompts go through the processing class as they are; conversational ones (lists of messages)
    through its chat template with the generation prompt. None when there is no prompt, or when the
    processing class cannot render the messages without the trainer's per-batch inputs (images, tools of
    an environment): the check that reads it is then skipped, as TRL itself renders them later.
    """
    prompts = list(prompts)
    if not prompts:
        return None
    processing = trainer.processing_class
    if isinstance(prompts[0], str):
        ids = processing(text=prompts)["input_ids"]
    else:
        try:
            ids = processing.apply_chat_template(
                conversation=prompts,
                tools=getattr(trainer, "tools", None) or None,
                chat_template=getattr(trainer, "chat_template", None),
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                **(getattr(trainer, "chat_template_kwargs", None) or {}),
            )["input_ids"]
        except Exception:  # a processor that needs more than the messages; TRL checks nothing here either
            return None
    return max(len(row) for row in ids)


def selection_rewards(
    rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, reward_index: int | None
) -> torch.Tensor:
    """The ``(N,)`` reward the strategy selects on.

    Args:
        rewards_per_func: ``(N, F)`` gathered rewards, NaN where a function returned None.
        reward_weights: ``(F,)`` TRL ``reward_weights``.
        reward_index: one function's column, or None for the weighted sum (NaN if every function
            returned None for that row, as in TRL).
    """
    if reward_index is not None:
        return rewards_per_func[:, reward_index].float()
    weights = reward_weights.to(device=rewards_per_func.device, dtype=rewards_per_func.dtype)
    summed = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    return summed.masked_fill(unscorable, float("nan")).float()


def _gather_padded(accelerator, tensor: torch.Tensor) -> torch.Tensor:
    """Gather a per-rank ``(B, T_rank)`` tensor into ``(N, T_max)``, right-padding with zeros."""
    if accelerator.num_processes == 1:
        return tensor
    padded = accelerator.pad_across_processes(tensor, dim=1, pad_index=0, pad_first=False)
    return accelerator.gather(padded)


def global_rollout_batch(
    accelerator,
    global_rewards: torch.Tensor,
    num_generations: int,
    loss_mask: torch.Tensor,
    advantages: torch.Tensor,
    domains: Sequence[str] | None,
    prompt_keys: Sequence[Hashable],
    completion_ids: torch.Tensor | None = None,
) -> RolloutBatch:
    """The whole generation batch of all processes, identical on every rank.

    Args:
        accelerator: the trainer's ``accelerate.Accelerator``.
        global_rewards: ``(N,)`` already gathered reward.
        num_generations: responses per prompt (TRL ``num_generations``).
        loss_mask: ``(B, T)`` this rank's completion mask (times TRL's tool mask).
        advantages: ``(B,)`` or ``(B, T)`` this rank's advantages.
        domains: this rank's ``B`` domain labels, or None when the dataset has no domain column.
        prompt_keys: this rank's ``B`` prompt keys (`sampling.row_key`: strings or ints).
        completion_ids: this rank's ``(B, T)`` completion token ids, gathered only when given
            (a pre-rollout filter's noise check reads them).
    """
    device = global_rewards.device
    mask = _gather_padded(accelerator, loss_mask.to(device))
    if advantages.dim() == 2:
        adv = _gather_padded(accelerator, advantages.to(device))
    else:
        adv = accelerator.gather(advantages.to(device)) if accelerator.num_processes > 1 else advantages.to(device)
    ids = None if completion_ids is None else _gather_padded(accelerator, completion_ids.to(device))
    keys = list(prompt_keys)
    all_domains = None if domains is None else [str(d) for d in domains]
    if accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        keys = gather_object(keys)
        if all_domains is not None:
            all_domains = [str(d) for d in gather_object(all_domains)]
    group_ids = torch.arange(global_rewards.shape[0], device=device) // num_generations
    return RolloutBatch(
        rewards=global_rewards,
        group_ids=group_ids,
        completion_mask=mask.bool(),
        advantages=adv.float(),
        domains=all_domains,
        prompt_keys=keys,
        completion_ids=ids,
    )


def local_policy_batch(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    entropies: torch.Tensor | None,
) -> RolloutBatch:
    """One micro-batch with the current policy's detached signals, for ``strategy.apply_policy``.

    Shapes: ``rewards``/``group_ids`` ``(B,)``, ``loss_mask``/``logprobs``/``entropies`` ``(B, T)``,
    ``advantages`` ``(B,)`` or ``(B, T)``.
    """
    return RolloutBatch(
        rewards=rewards.float(),
        group_ids=group_ids,
        completion_mask=loss_mask.bool(),
        advantages=advantages.float(),
        logprobs=logprobs.detach().float(),
        entropies=None if entropies is None else entropies.detach().float(),
    )
