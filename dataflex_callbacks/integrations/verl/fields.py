"""Conversion between verl's batch fields and the core's `RolloutBatch` / `Decision`.

verl keeps one row per response with right-padded response-token tensors of width ``L``:
``response_mask (N, L)``, ``token_level_scores``/``token_level_rewards (N, L)`` (the outcome
score sits on the last valid token), ``advantages (N, L)``, ``old_log_probs (N, L)``,
``entropy (N, L)``, the GRPO group id ``uid`` (one string per prompt) and the dataset's columns
(``data_source``, ``index``, ...) as non-tensor arrays. Everything here works on plain dicts of
those tensors/arrays, so it serves both a ``DataProto`` (``.batch`` + ``.non_tensor_batch``) and
the padded TensorDicts the v1 trainer reads from TransferQueue.

How a `Decision` reaches verl's loss (`loss_fields_from_decision`):

- ``rollout_is_weights (N, L)`` = verl's own weights (rollout correction), if any, times the
  decision's weights. Every verl policy loss except ``geo_mean`` (geometric mean of the weights
  per sequence) and ``bypass_mode`` (recomputes its own) multiplies it into the per-token loss.
- Dropped responses (and tokens dropped by a token-level selector) also get ``response_mask`` and
  ``loss_mask`` zeroed, exactly like verl's own no-op padding rows. That removes them from the
  entropy and KL-loss terms (which ignore ``rollout_is_weights``) and from the token count that
  the engine sums from ``loss_mask`` for the ``token-mean`` denominator.
- Each ``loss_agg_mode`` is one of the core's loss aggregations (`LOSS_AGG_KINDS`, declared here
  with the host's declaration, `host.py`; `dataflex_callbacks.host.AGGREGATIONS`). The
  ``seq-mean-*`` modes (row-normalised) divide by a sequence count the trainer fixes
  (``ppo_mini_batch_size * rollout.n``), so the policy-gradient weights are scaled by `removal_scale`
  ``rows / kept rows``. The entropy and KL terms of those modes keep verl's fixed denominator
  (they are not weighted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dataflex_callbacks import Decision, RolloutBatch
from dataflex_callbacks.errors import BatchError
from dataflex_callbacks.host import ROW_NORMALISED, HostLosses, kept_token_mask, removal_scale

# verl's token-mean recounts its tokens from loss_mask, i.e. the kept ones.
VERL_LOSSES = HostLosses(
    "verl",
    "loss_agg_mode",
    {
        "token-mean": "token_mean_global",
        "token-sum": "token_sum",
        "seq-mean-token-sum": "sequence_sum",
        "seq-mean-token-mean": "sequence_mean",
        "seq-mean-token-sum-norm": "fixed_length",
    },
    "actor_rollout_ref.actor.loss_agg_mode",
)
"""verl's ``loss_agg_mode`` names, registered with the core by the host's declaration (`host.py`)."""
LOSS_AGG_KINDS = VERL_LOSSES.kinds
"""verl ``loss_agg_mode`` -> the core's loss aggregation (``token-mean``: verl recounts tokens from ``loss_mask``)."""
LOSS_AGG_MODES = VERL_LOSSES.names
SEQUENCE_MEAN_MODES = VERL_LOSSES.names_of(*ROW_NORMALISED)
DEFAULT_DOMAIN_KEY = "data_source"
"""verl's dataset column naming the task / domain: the domain column when ``dataflex.domain_key`` names none."""


def group_ids_from_uids(uids: Sequence[Any]) -> torch.Tensor:
    """``(N,)`` int64 group ids from verl's per-response ``uid`` strings (first appearance order)."""
    index: dict[Any, int] = {}
    return torch.tensor([index.setdefault(uid, len(index)) for uid in uids], dtype=torch.int64)


def completion_rewards(rm_scores: torch.Tensor) -> torch.Tensor:
    """Each completion's reward, the sum of its row of verl's ``rm_scores`` (the score sits on its last response
    token): ``(N,)`` float64, each row summed in ``rm_scores``' own dtype.

    ``rm_scores``: ``(N, L)`` right-padded with zeros, or a nested tensor of ``N`` rows of their own lengths (strided or
    jagged layout, as TransferQueue may return it); both layouts give the same sums.
    """
    if rm_scores.is_nested:
        rm_scores = rm_scores.to_padded_tensor(0.0)
    return rm_scores.sum(dim=-1).to(torch.float64)


def _as_list(values: Any) -> list:
    if isinstance(values, np.ndarray):
        return values.tolist()
    if hasattr(values, "tolist"):
        return list(values.tolist())
    return list(values)


def rollout_batch_from_fields(
    tensors: Mapping[str, torch.Tensor],
    non_tensors: Mapping[str, Any],
    domain_key: str | None = None,
    policy_versions: torch.Tensor | None = None,
    trainer_version: int | None = None,
) -> RolloutBatch:
    """Build a `RolloutBatch` from verl's padded per-response fields.

    Args:
        tensors: ``response_mask (N, L)`` and ``token_level_scores`` or ``token_level_rewards`` or
            ``rm_scores`` ``(N, L)`` are required; ``advantages``, ``old_log_probs``, ``entropy``
            ``(N, L)`` are used when present.
        non_tensors: ``uid`` (N,) for groups; the domain column and ``index`` (prompt keys)
            when present.
        domain_key: the column holding the domain label (only that one when given); default
            ``data_source`` (verl's), falling back to ``domain``.
        policy_versions: ``(N,)`` the policy version each response was generated with (the async
            trainers: verl's ``max_global_steps`` tag), with ``trainer_version`` the trainer's now.

    The reward of a response is the sum of its token-level *scores* (the verifier's outcome
    score, before any in-reward KL penalty), which is what the difficulty and mixing signals mean.
    """
    if "response_mask" not in tensors:
        raise BatchError(f"verl batch has no 'response_mask'; its fields are {sorted(tensors)}")
    mask = tensors["response_mask"].bool()
    reward_key = next((k for k in ("token_level_scores", "token_level_rewards", "rm_scores") if k in tensors), None)
    if reward_key is None:
        raise BatchError(
            "verl batch has no token-level scores ('token_level_scores', 'token_level_rewards' or "
            f"'rm_scores'); its fields are {sorted(tensors)}. Run the strategy after the reward step"
        )
    rewards = (tensors[reward_key].float() * mask).sum(dim=-1)
    uids = non_tensors.get("uid")
    group_ids = group_ids_from_uids(_as_list(uids)) if uids is not None else None
    domains = None
    for key in [domain_key] if domain_key else [DEFAULT_DOMAIN_KEY, "domain"]:
        if key in non_tensors:
            domains = [str(d) for d in _as_list(non_tensors[key])]
            break
    prompt_keys = _as_list(non_tensors["index"]) if "index" in non_tensors else None
    if prompt_keys is not None and uids is not None:
        # The dataset index identifies a prompt across epochs; the uid only within one batch.
        prompt_keys = [key if key is not None else uid for key, uid in zip(prompt_keys, _as_list(uids), strict=True)]

    def optional(name: str) -> torch.Tensor | None:
        value = tensors.get(name)
        return None if value is None else value.float()

    return RolloutBatch(
        rewards=rewards,
        group_ids=group_ids,
        completion_mask=mask,
        advantages=optional("advantages"),
        logprobs=optional("old_log_probs"),
        entropies=optional("entropy"),
        domains=domains,
        prompt_keys=prompt_keys,
        policy_versions=policy_versions,
        trainer_version=trainer_version,
    )


def check_loss_agg_mode(loss_agg_mode: str) -> str:
    """The core aggregation of ``loss_agg_mode``;
    a `ConfigError` naming the known modes when it is new to the adapter."""
    return VERL_LOSSES.aggregation(loss_agg_mode)


def loss_fields_from_decision(
    decision: Decision, response_mask: torch.Tensor, loss_agg_mode: str, existing_weights: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Per-token loss fields that make verl's loss train on the decision.

    Args:
        decision: the strategy's decision for these ``N`` rows.
        response_mask: ``(N, L)`` verl's response mask.
        loss_agg_mode: ``actor_rollout_ref.actor.loss_agg_mode``.
        existing_weights: ``(N, L)`` ``rollout_is_weights`` verl already computed, multiplied in.

    Returns:
        ``{"rollout_is_weights": (N, L) float32, "response_mask": (N, L), "loss_mask": (N, L)}``
        (masks in ``response_mask``'s dtype). With a single PPO mini-batch per step the policy loss
        and its gradient equal those of the batch with the dropped responses physically removed,
        for every ``loss_agg_mode``. If the decision drops everything, the masks are left
        unchanged (a zero token count would make verl's loss NaN) and all weights are 0.
    """
    kind = check_loss_agg_mode(loss_agg_mode)
    valid = response_mask.bool()
    n, length = valid.shape
    weights = decision.weights.to(device=valid.device, dtype=torch.float32)
    if weights.dim() == 1:
        weights = weights.unsqueeze(1).expand(n, length)
    elif weights.shape != valid.shape:
        raise BatchError(f"decision weights have shape {tuple(weights.shape)}, the response mask {tuple(valid.shape)}")
    trained = kept_token_mask(decision, valid)
    weights = torch.where(trained, weights, torch.zeros((), device=valid.device))

    if trained.any():
        new_mask = trained
        if kind in ROW_NORMALISED:
            weights = weights * removal_scale(kind, valid.any(dim=1).sum(), trained.any(dim=1).sum())
    else:
        new_mask = valid
    if existing_weights is not None:
        weights = weights * existing_weights.to(device=valid.device, dtype=torch.float32)
    mask_out = new_mask.to(response_mask.dtype)
    return {"rollout_is_weights": weights, "response_mask": mask_out, "loss_mask": mask_out.clone()}
