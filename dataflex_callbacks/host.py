"""The host contract: what every adapter (TRL, Lightning, verl, your own trainer) does with a strategy, written once.

A host adapter builds a `RolloutBatch` from its trainer's tensors, asks ``Strategy.apply`` for a
`Decision` and folds it into its loss. The steps that do not depend on the host live here:

- `as_strategy`: a `Strategy` from a Strategy, preset name, config dict or YAML path;
- `resolve_domain_key`: the dataset column holding domains (the adapter's argument, else the
  strategy config's ``domain_key``, else the host's default);
- `grpo_fields` / `batch_fields`: the `RolloutBatch` fields a host provides, for ``Strategy.check_host``;
- `local_decision`: a decision made on the batch of all ranks, cut to one rank's rows;
- `kept_token_mask`: which tokens stay in the loss (and its normaliser);
- `AGGREGATIONS`, `aggregate` and `removal_scale`: how a loss is normalised, and the ``B / K``
  factor that makes masking rows out of a row-normalised loss equal to removing them;
- `accept_prompts`: the pre-rollout acceptance loop that skips prompts a filter predicts to be useless.

Adapters keep only what their host needs besides: where the tensors are, how they are gathered
across ranks, which hook writes the loss fields back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Hashable, Sequence

import numpy as np
import torch

from .batch import RolloutBatch
from .errors import BatchError, ConfigError
from .strategy import Decision, Strategy, build_strategy

# ------------------------------------------------------------ building the strategy


def as_strategy(strategy: Any) -> Strategy:
    """``strategy`` itself when it is a `Strategy`, else `build_strategy` of it (preset name, dict or YAML path)."""
    return strategy if isinstance(strategy, Strategy) else build_strategy(strategy)


DEFAULT_DOMAIN_KEY = "domain"
"""The domain column read when neither the adapter's argument nor the config's ``domain_key`` names one."""


def resolve_domain_key(strategy: Strategy, given: str | None = None, *, argument: str = "domain_column",
                       default: str = DEFAULT_DOMAIN_KEY) -> tuple[str, str]:
    """The dataset column holding each prompt's domain, and where that name came from (for error messages).

    The adapter's argument (``given``) and the strategy config's ``domain_key`` name the same
    column, so one YAML means the same column on every host: the one given is used, the host's
    ``default`` when neither is, and two different names are an error.

    Args:
        strategy: the run's strategy (its ``domain_key``, None when the config sets none).
        given: the adapter's own argument, None when not passed.
        argument: how the adapter's argument is spelled, for the messages (``"domain_column"``).
        default: the host's column when nothing names one (``"domain"``; verl: ``"data_source"``).

    Returns:
        ``(column, source)``: ``source`` says which setting chose it, e.g. ``"domain_column='topic'"``.
    """
    configured = getattr(strategy, "domain_key", None)
    if given is None:
        if configured is None:
            return default, f"the default domain column {default!r}"
        return str(configured), f"the strategy config's domain_key={configured!r}"
    if not isinstance(given, str) or not given:
        raise ConfigError(f"dataflex: {argument} must be a column name (a non-empty string); got {given!r}")
    if configured is not None and str(configured) != given:
        raise ConfigError(
            f"dataflex: {argument}={given!r} contradicts the strategy config's domain_key={configured!r}; both name "
            f"the column holding each prompt's domain, so give it once: drop {argument} to use the config's, or set "
            f"domain_key: {given} in the config"
        )
    return given, f"{argument}={given!r}"


# ------------------------------------------------------------ batch fields

ROLLOUT_FIELDS = ("rewards", "group_ids", "completion_mask", "advantages", "logprobs", "entropies", "domains",
                  "prompt_keys", "completion_ids")
"""Every `RolloutBatch` field, in its order."""

TENSOR_FIELDS = tuple(name for name in ROLLOUT_FIELDS if name not in ("domains", "prompt_keys"))
"""The `RolloutBatch` fields that are tensors."""

GRPO_FIELDS = frozenset({"rewards", "group_ids", "completion_mask", "advantages", "logprobs", "entropies",
                         "prompt_keys"})
"""What a GRPO-style trainer provides for every batch (TRL, verl); ``domains`` only when the data has them."""


def grpo_fields(domains: bool) -> set[str]:
    """The fields a GRPO-style host provides, with ``domains`` when its data has a domain column."""
    return set(GRPO_FIELDS) | ({"domains"} if domains else set())


def batch_fields(batch: RolloutBatch) -> set[str]:
    """The fields ``batch`` holds (a host that hands over a user-built batch provides exactly these)."""
    return {name for name in ROLLOUT_FIELDS if batch.has(name)}


# ------------------------------------------------------------ decisions on the host's rows


def local_decision(decision: Decision, rows: slice, num_tokens: int | None = None) -> Decision:
    """The part of a decision made on the batch of all ranks that covers one rank's rows.

    Args:
        decision: the strategy's decision over all ``N`` rows (rank-major order).
        rows: this rank's rows of the global batch, e.g. ``slice(rank * B, (rank + 1) * B)``.
        num_tokens: this rank's token length ``L_rank`` (the global batch is padded to the longest);
            token tensors are cut to it. None keeps them whole.

    Returns:
        A `Decision` whose ``keep (B,)``, ``weights (B,)`` or ``(B, L_rank)``, ``token_keep`` and
        ``response_weights`` are ``decision``'s at ``rows`` (views, no copy); metrics are a copy.
    """

    def cut(value: torch.Tensor | None) -> torch.Tensor | None:
        if value is None:
            return None
        value = value[rows]
        return value[:, :num_tokens] if value.dim() == 2 and num_tokens is not None else value

    return replace(decision, keep=cut(decision.keep), weights=cut(decision.weights),
                   token_keep=cut(decision.token_keep), metrics=dict(decision.metrics),
                   response_weights=cut(getattr(decision, "response_weights", None)))


def kept_token_mask(decision: Decision, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(N, L)`` bool: the tokens that stay in the loss and its normaliser.

    A token stays when it is valid, its response is kept and no token-level selector dropped it.

    Args:
        decision: the strategy's decision for these ``N`` rows.
        mask: ``(N, L)`` valid tokens (bool or 0/1); None: every position of ``decision.token_keep``'s
            shape, or of ``(N, 1)`` without one (response-level only).
    """
    keep = decision.keep
    if mask is None:
        shape = decision.token_keep.shape if decision.token_keep is not None else (keep.shape[0], 1)
        mask = torch.ones(shape, dtype=torch.bool, device=keep.device)
    kept = mask.bool() & keep.to(mask.device, torch.bool).unsqueeze(1)
    if decision.token_keep is not None:
        kept = kept & decision.token_keep.to(mask.device, torch.bool)[:, : mask.shape[1]]
    return kept


# ------------------------------------------------------------ loss aggregation

AGGREGATIONS = {
    "token_mean": "sum of the token losses over the tokens of the reduced batch, counted from the mask",
    "token_mean_global": "sum of the token losses over a token count the host gives (whole generation batch)",
    "token_sum": "sum of the token losses (or over a constant)",
    "sequence_mean": "mean over the rows of each row's token mean",
    "sequence_sum": "mean over the rows of each row's token sum",
    "fixed_length": "sum of the token losses over rows * L",
}
"""The ways a host normalises a per-token loss; every host's loss-type names map onto these.

What the masked loss needs to equal the loss of the physically reduced batch:

- ``token_mean``, ``token_sum``: nothing, the mask already removes the dropped tokens from the
  numerator and the count;
- ``token_mean_global``: the host's token count must count only kept tokens (TRL's
  ``num_items_in_batch``; verl recounts it from ``loss_mask``);
- ``sequence_mean``, ``sequence_sum``, ``fixed_length`` (`ROW_NORMALISED`): the normaliser counts
  the rows of the micro-batch, so the loss (or its weights) is multiplied by `removal_scale` ``B / K``.
"""

ROW_NORMALISED = ("sequence_mean", "sequence_sum", "fixed_length")
"""Aggregations whose normaliser counts rows: masking ``B - K`` of ``B`` rows out needs the ``B / K`` rescale."""


def check_aggregation(kind: str) -> str:
    """``kind`` when it is one of `AGGREGATIONS`; else an error naming the choices."""
    if kind not in AGGREGATIONS:
        raise ValueError(f"dataflex: unknown loss aggregation {kind!r}; choose one of {list(AGGREGATIONS)}")
    return kind


def aggregate(per_token_loss: torch.Tensor, mask: torch.Tensor, kind: str, *, weights: torch.Tensor | None = None,
              max_length: int | None = None,
              num_items: torch.Tensor | float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Numerator and normaliser of ``kind`` over the tokens in ``mask``: ``loss = total / count``.

    A row with no token in ``mask`` is no row (it is not counted by the row normalisers), so
    ``mask = kept_token_mask(...)`` gives the loss of the physically reduced batch.

    Args:
        per_token_loss: ``(N, L)`` loss of every token. Positions outside ``mask`` may hold anything,
            inf and NaN included.
        mask: ``(N, L)`` bool, the tokens that count.
        kind: one of `AGGREGATIONS`.
        weights: ``(N,)`` or ``(N, L)`` per-response or per-token weights multiplied into the losses.
        max_length: ``L`` of ``fixed_length`` (default ``per_token_loss.shape[1]``).
        num_items: the token count of ``token_mean_global`` (default: the tokens in ``mask``).

    Returns:
        ``(total, count)``, 0-dim; ``total`` carries the gradient, ``count`` is a float without it.
    """
    check_aggregation(kind)
    if per_token_loss.dim() != 2 or per_token_loss.shape != mask.shape:
        raise BatchError(f"per_token_loss must have shape (N, L) = {tuple(mask.shape)} like the completion mask; "
                         f"got {tuple(per_token_loss.shape)}")
    dtype = per_token_loss.dtype
    if weights is not None:
        weights = weights.to(device=per_token_loss.device, dtype=dtype)
        per_token_loss = per_token_loss * (weights.unsqueeze(1) if weights.dim() == 1 else weights)
    # where(), not a product: positions outside the mask may hold inf/NaN (e.g. log-prob of padding).
    terms = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))
    tokens_per_row = mask.sum(dim=1)
    rows = (tokens_per_row > 0).sum().to(dtype)
    if kind == "token_mean":
        return terms.sum(), mask.sum().to(dtype)
    if kind == "token_mean_global":
        count = mask.sum() if num_items is None else torch.as_tensor(num_items, device=per_token_loss.device)
        return terms.sum(), count.to(dtype)
    if kind == "token_sum":
        return terms.sum(), torch.ones((), dtype=dtype, device=per_token_loss.device)
    if kind == "sequence_mean":
        return (terms.sum(dim=1) / tokens_per_row.clamp(min=1).to(dtype)).sum(), rows
    if kind == "sequence_sum":
        return terms.sum(), rows
    length = per_token_loss.shape[1] if max_length is None else int(max_length)
    return terms.sum(), rows * length


def finish_loss(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``total / count``, and an exact zero (still in the graph) when nothing was kept."""
    return total / count.clamp(min=1)


def removal_scale(kind: str, rows: torch.Tensor | int, kept_rows: torch.Tensor | int) -> torch.Tensor:
    """Factor that turns a row-normalised loss with dropped rows masked out into the loss of the kept rows only.

    Args:
        kind: one of `AGGREGATIONS`.
        rows: ``B``, the rows the host's normaliser counts (0-dim tensor or int).
        kept_rows: ``K``, the rows that keep at least one token in the loss.

    Returns:
        0-dim float tensor: ``B / K`` for `ROW_NORMALISED` kinds (0 when ``K == 0``: nothing trains),
        else 1.
    """
    check_aggregation(kind)
    kept = torch.as_tensor(kept_rows)
    if kind not in ROW_NORMALISED:
        return torch.ones((), device=kept.device)
    rows = torch.as_tensor(rows, device=kept.device).float()
    return torch.where(kept > 0, rows / kept.clamp(min=1).float(), torch.zeros((), device=kept.device))


# ------------------------------------------------------------ pre-rollout acceptance


@dataclass
class PromptAcceptance:
    """What one pass of `accept_prompts` over a list of candidate prompts took.

    Attributes:
        accepted: ``(A,)`` int64 positions of the accepted candidates, ``A <= need``, ascending.
        considered: candidates looked at: up to and including the last accepted one when ``need``
            was met, else all of them; the rest wait for the next pass.
        skipped: considered candidates the filter turned down (excluded ones are not counted).
    """

    accepted: np.ndarray
    considered: int
    skipped: int


def accept_prompts(pre_select: Any, keys: Sequence[Hashable], need: int, rng: np.random.Generator, *,
                   labels: Sequence[str] | None = None, exclude: np.ndarray | None = None) -> PromptAcceptance:
    """Take up to ``need`` of the candidate prompts, in order, each with the filter's keep probability.

    Each candidate draws one uniform from ``rng``; it is accepted when the uniform is below
    ``pre_select.keep_probability(keys, labels)``. Candidates after the ``need``-th accepted one
    are not considered (the caller offers them again), so no uniform is wasted on a decision
    nobody used.

    Args:
        pre_select: a pre-rollout filter (``keep_probability(keys, labels) -> (n,)``).
        keys: the ``n`` candidates' prompt keys, in draw order.
        need: how many prompts are still wanted, ``>= 1``.
        rng: the host's generator for these draws (``n`` uniforms are drawn).
        labels: the candidates' domains, for the filter's prior on unseen prompts.
        exclude: ``(n,)`` bool, candidates never to take (e.g. already in this batch).
    """
    keep_probability = pre_select.keep_probability(list(keys), labels)
    if exclude is not None:
        keep_probability = np.where(exclude, 0.0, keep_probability)
    accepted = np.flatnonzero(rng.random(len(keys)) < keep_probability)[:need]
    considered = int(accepted[-1]) + 1 if len(accepted) == need else len(keys)
    excluded = 0 if exclude is None else int(np.asarray(exclude)[:considered].sum())
    return PromptAcceptance(accepted=accepted, considered=considered, skipped=considered - len(accepted) - excluded)
