"""The host contract: what every adapter (TRL, Lightning, verl, your own trainer) does with a strategy, written once.

A host adapter builds a `RolloutBatch` from its trainer's tensors, asks ``Strategy.apply`` for a
`Decision` and folds it into its loss. The steps that do not depend on the host live here:

- `as_strategy`: a `Strategy` from a Strategy, preset name, config dict or YAML path;
- `resolve_domain_key`: the dataset column holding domains (the adapter's argument, else the
  strategy config's ``domain_key``, else the host's default);
- `grpo_fields` / `batch_fields`: the `RolloutBatch` fields a host provides, for ``Strategy.check_host``;
- `decide`: the one call to ``Strategy.apply`` (seeding, which rank warns);
- `local_decision`, `restrict_rows`, `micro_batch_decision`: a decision made on the batch of all
  ranks, cut to one rank's rows, to the rows that may stay, to one micro-batch;
- `kept_token_mask`: which tokens stay in the loss (and its normaliser);
- `AGGREGATIONS`, `aggregate` and `removal_scale`: how a loss is normalised, and the ``B / K``
  factor that makes masking rows out of a row-normalised loss equal to removing them;
  `HostLosses`: a host's loss names mapped onto those kinds (declared with `declarations.register_host`);
- `acts_before_rollout` / `prompt_choosing_parts`: whether prompts must come through the sampler;
- `accept_from` (with `accept_prompts`, `BatchFeed`) and `set_group_size`: the pre-rollout
  acceptance loop that skips prompts a filter predicts to be useless (`prompt_acceptance`);
- `checkpoint_state`, `restore_strategy`, `read_state_file`: what a checkpoint holds and how it is
  restored (`checkpoint_state`).

Adapters keep only what their host needs besides: where the tensors are, how they are gathered
across ranks, which hook writes the loss fields back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from dataflex_callbacks.errors import BatchError, ConfigError
from dataflex_callbacks.rollout.batch import ROLLOUT_FIELDS, RolloutBatch
from dataflex_callbacks.strategy.strategy import Decision, Strategy, build_strategy

# ------------------------------------------------------------ building the strategy


def as_strategy(strategy: Any) -> Strategy:
    """``strategy`` itself when it is a `Strategy`, else `build_strategy` of it (preset name, dict or YAML path)."""
    return strategy if isinstance(strategy, Strategy) else build_strategy(strategy)


DEFAULT_DOMAIN_KEY = "domain"
"""The domain column read when neither the adapter's argument nor the config's ``domain_key`` names one."""


def resolve_domain_key(
    strategy: Strategy, given: str | None = None, *, argument: str = "domain_key", default: str = DEFAULT_DOMAIN_KEY
) -> tuple[str, str]:
    """The dataset column holding each prompt's domain, and where that name came from (for error messages).

    The adapter's argument (``given``) and the strategy config's ``domain_key`` name the same
    column, so one YAML means the same column on every host: the one given is used, the host's
    ``default`` when neither is, and two different names are an error.

    Args:
        strategy: the run's strategy (its ``domain_key``, None when the config sets none).
        given: the adapter's own argument, None when not passed.
        argument: how the adapter's argument is spelled, for the messages (``"domain_key"``).
        default: the host's column when nothing names one (``"domain"``; verl: ``"data_source"``).

    Returns:
        ``(column, source)``: ``source`` says which setting chose it, e.g. ``"domain_key='topic'"``.
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


TENSOR_FIELDS = tuple(name for name in ROLLOUT_FIELDS if name not in ("domains", "prompt_keys", "trainer_version"))
"""The `RolloutBatch` fields that are tensors."""

GRPO_FIELDS = frozenset(
    {"rewards", "group_ids", "completion_mask", "advantages", "logprobs", "entropies", "prompt_keys"}
)
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

    def cut(value: torch.Tensor) -> torch.Tensor:
        value = value[rows]
        return value[:, :num_tokens] if value.dim() == 2 and num_tokens is not None else value

    response_weights = getattr(decision, "response_weights", None)
    return replace(
        decision,
        keep=cut(decision.keep),
        weights=cut(decision.weights),
        token_keep=None if decision.token_keep is None else cut(decision.token_keep),
        metrics=dict(decision.metrics),
        response_weights=None if response_weights is None else cut(response_weights),
    )


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


def restrict_rows(decision: Decision, rows: torch.Tensor) -> Decision:
    """``decision`` with the rows outside ``rows`` dropped too (keep False, weights 0).

    Args:
        decision: a decision over ``N`` rows.
        rows: ``(N,)`` bool, the rows that may stay (e.g. the groups carrying signal of a short
            dynamic-sampling step).
    """
    mask = rows.unsqueeze(1) if decision.weights.dim() == 2 else rows
    weights = decision.weights * mask.to(decision.weights.dtype)
    return _with_changes(decision, {"keep": decision.keep & rows, "weights": weights})


def micro_batch_decision(
    decision: Decision, keep: torch.Tensor, weights: torch.Tensor, response_weights: torch.Tensor | None
) -> Decision:
    """The decision over one micro-batch's rows, from the per-row tensors the host carried there.

    A host that shuffles and splits its batch after the decision (TRL) carries ``keep (B,)``,
    ``weights (B,)`` or ``(B, L)`` and ``response_weights (B,)`` with the rows; the token mask was
    already folded into the loss mask, so it is dropped here.
    """
    changes: dict[str, Any] = {"keep": keep, "weights": weights}
    if hasattr(decision, "response_weights"):
        changes["response_weights"] = response_weights
    if getattr(decision, "token_keep", None) is not None:
        changes["token_keep"] = None
    return _with_changes(decision, changes)


def _with_changes(decision: Any, changes: Mapping[str, Any]) -> Any:
    """A copy of ``decision`` with the fields in ``changes`` replaced
    (a `Decision`, or any object with a ``__dict__``)."""
    if dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        return dataclasses.replace(decision, **changes)
    kind: Any = type(decision)
    changed = kind.__new__(kind)
    changed.__dict__.update(decision.__dict__)
    changed.__dict__.update(changes)
    return changed


# ------------------------------------------------------------ the step's decision

STEP_SEED_STRIDE = 1_000_003
"""``seed * STEP_SEED_STRIDE + step`` seeds the torch CPU generator of a step's decision (see `decide`)."""


def decide(
    strategy: Strategy,
    batch: RolloutBatch,
    step: int,
    *,
    seed: int | None = None,
    warn: bool = True,
    defer_policy: bool = False,
    host_step: int | None = None,
) -> Decision:
    """The strategy's decision on the batch of all ranks: the one call every adapter makes to ``Strategy.apply``.

    ``batch`` is the global batch, identical on every rank, so the mixing and pre-rollout
    statistics are not all-reduced again (``sync=False``). Whether the pre-rollout filter observes
    the batch is the strategy's own rule: not when a `SignalGroupBuffer` drives it (the buffer
    showed the filter every generated round already). A host that names its own settings in the
    strategy's warnings binds them once, with ``Strategy.bind_selection_reward``.

    Args:
        strategy: the run's strategy.
        batch: the step's rollouts of all ranks.
        step: the host's step counter.
        seed: the run's seed: torch's default CPU generator is seeded from ``(seed, step)`` for the
            call and restored after, so any CPU randomness in the strategy is identical on every
            rank and the host's own random stream is left as it would be without the adapter
            (TRL). None: the strategy draws from the host's stream as it stands.
        warn: whether this process warns when a step keeps nothing. Every rank decides alike, so
            only rank 0 warns: pass ``rank == 0`` (a single-controller host such as verl: True).
        defer_policy: leave the parts that need current-policy signals to ``Strategy.apply_policy``.
        host_step: this step as the host numbers it in its logs, which warnings name (TRL:
            ``global_step + 1``); None: ``step``.
    """

    def apply() -> Decision:
        return strategy.apply(batch, step, sync=False, defer_policy=defer_policy, host_step=host_step, warn=warn)

    if seed is None:
        return apply()
    generator = torch.default_generator
    saved_rng = generator.get_state()
    generator.manual_seed(int(seed) * STEP_SEED_STRIDE + int(step))
    try:
        return apply()
    finally:
        generator.set_state(saved_rng)


def prompt_choosing_parts(strategy: Strategy) -> tuple[str, ...]:
    """The strategy's parts that choose prompts before rollout:
    ``"mix"`` (which domain) and ``"pre_select"`` (which to skip).

    They act through the host's prompt sampler, so a host must draw its prompts through one.
    """
    present = (("mix", strategy.mix_enabled), ("pre_select", getattr(strategy, "pre_select", None) is not None))
    return tuple(part for part, there in present if there)


def acts_before_rollout(strategy: Strategy) -> bool:
    """True when the strategy has a part that chooses prompts (``mix`` or ``pre_select``)."""
    return bool(prompt_choosing_parts(strategy))


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
        raise ConfigError(f"dataflex: unknown loss aggregation {kind!r}; choose one of {list(AGGREGATIONS)}")
    return kind


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    kind: str,
    *,
    weights: torch.Tensor | None = None,
    max_length: int | None = None,
    num_items: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
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
        raise BatchError(
            f"per_token_loss must have shape (N, L) = {tuple(mask.shape)} like the completion mask; "
            f"got {tuple(per_token_loss.shape)}"
        )
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


@dataclass(frozen=True)
class HostLosses:
    """How one host names its losses: the setting that chooses one, and each name's kind of `AGGREGATIONS`.

    Attributes:
        host: the host, as messages name it.
        setting: the host's setting naming the loss (``loss_type``, ``loss_agg_mode``).
        kinds: the host's loss name -> its aggregation kind.
        where: where the user sets it, for the message of an unknown name.
    """

    host: str
    setting: str
    kinds: Mapping[str, str]
    where: str

    @property
    def names(self) -> tuple[str, ...]:
        """Every loss name the adapter knows, in the registry's order."""
        return tuple(self.kinds)

    def names_of(self, *kinds: str) -> tuple[str, ...]:
        """The loss names whose aggregation is one of ``kinds`` (e.g. every row-normalised loss)."""
        return tuple(name for name, kind in self.kinds.items() if kind in kinds)

    def aggregation(self, name: str) -> str:
        """The aggregation kind of the host's loss ``name``; a `ConfigError` naming the known ones when it is new."""
        if name not in self.kinds:
            raise ConfigError(
                f"dataflex: unknown {self.host} {self.setting} {name!r}; choose one of "
                f"{list(self.kinds)} in {self.where}, or open an issue so the adapter learns how this "
                "loss normalises"
            )
        return self.kinds[name]
