"""Dynamic sampling (DAPO arXiv 2503.14476, section 3.2): every step trains on B groups that carry signal.

A training loop generates a round of groups, scores them, and adds them to a `SignalGroupBuffer`;
the buffer keeps the groups that carry signal and says whether B are in hand. While they are not,
and fewer than ``max_rounds`` rounds were generated, the loop generates another round. Then it
takes exactly B groups (the carried ones first, oldest first) and trains on them; signal groups
beyond B wait for the next step (``carry_over``), unless older than ``max_age`` steps::

    buffer = SignalGroupBuffer(strategy)               # reads the strategy's dynamic_sampling part
    buffer.start_step(num_groups=B, step=global_step)
    while buffer.should_generate_more():
        prompts = next(prompt_stream)
        rewards, group_ids, rows = generate_and_score(prompts)
        buffer.add(RolloutBatch(rewards, group_ids=group_ids), payload=rows)
    taken = buffer.take()                              # SignalGroups: exactly B groups unless taken.short
    loss = train_on(taken.payload, taken.group_index)
    log(taken.metrics)                                 # dynamic/rounds, dynamic/generated, ...

A group carries signal when it survives the strategy's ``select`` part (at least one of its rows
is kept; `signal_rows`); with no ``select`` part, when its rewards are not all equal
(``group_reward_variance > 0``, exactly 0 for equal rewards, so continuous rewards work too).

Distributed training: feed the buffer the batch gathered from every rank (identical on every
rank, with the payload each rank needs for its own rows), so every rank takes the same decision,
generates the same number of rounds and takes the same groups. A rank whose own prompts all give
zero-signal groups then keeps generating with the others and cannot hang a collective.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from dataflex_callbacks.components.scorers import group_reward_variance
from dataflex_callbacks.config.fields import NAN_POLICIES, DynamicSamplingConfig
from dataflex_callbacks.errors import BatchError, ConfigError, StateError, check_state
from dataflex_callbacks.rollout.batch import RolloutBatch, clean_signals
from dataflex_callbacks.rollout.groups import dense_groups, segment_max
from dataflex_callbacks.sampling._payloads import (
    compact_copy,
    concat_payloads,
    index_payload,
    payload_rows,
    slice_payload,
)
from dataflex_callbacks.strategy.parts import Part
from dataflex_callbacks.strategy.strategy import Strategy, build_strategy

DYNAMIC_METRICS = (
    "dynamic/rounds",
    "dynamic/generated",
    "dynamic/signal_groups",
    "dynamic/carried",
    "dynamic/short",
    "dynamic/carried_age_mean",
    "dynamic/dropped_stale",
)
"""The metric names of `SignalGroups.metrics` (hosts log them under their own prefix, e.g. ``dataflex/``)."""

_FROM_CONFIG = object()  # `SignalGroupBuffer(max_age=...)` left out: the config's (None is a value: never drop)
# Signals a judgement may read that `nan_policy` covers; policy signals are refused (see `_judging_part`).
_JUDGED_SIGNALS = ("rewards", "advantages")


# ---------------------------------------------------------------- the pure decision


def signal_rows(
    batch: RolloutBatch, strategy: Strategy | None = None, *, step: int | None = None, nan_policy: str | None = None
) -> torch.Tensor:
    """Which rows belong to a group that carries signal: ``(N,)`` bool, the same for every row of a group.

    Args:
        batch: scored rollouts with ``group_ids (N,)``; whatever else the select part's scorer reads.
        strategy: its ``select`` part judges (a group carries signal when at least one of its rows
            is kept); without a strategy or a select part, a group carries signal when its rewards
            are not all equal.
        step: the host's step, for the select part's ``warmup_steps`` (during warm-up it keeps every
            row, so every group carries signal); None: the select part always judges.
        nan_policy: how a non-finite reward (or advantage the scorer reads) counts; default the
            strategy's, else ``"drop"``. ``"zero"``: it counts as 0, as `Strategy.apply` counts it;
            ``"drop"``: its group carries no signal; ``"raise"``: a `BatchError`.

    Computed with segment operations (no Python loop over groups), on the batch's device.
    """
    if not isinstance(batch, RolloutBatch):
        raise BatchError(f"signal_rows expects a RolloutBatch; got {type(batch).__name__}")
    group_ids = _group_ids(batch)
    policy = nan_policy or (strategy.nan_policy if strategy is not None else "drop")
    if policy not in NAN_POLICIES:
        raise ConfigError(f"nan_policy must be one of {', '.join(NAN_POLICIES)}; got {policy!r}")
    n = batch.n
    if n == 0:
        return torch.zeros(0, dtype=torch.bool, device=batch.device)
    part = _judging_part(strategy)
    read = set(part.requires) if part is not None else set()
    judged = [
        name for name in _JUDGED_SIGNALS if getattr(batch, name) is not None and (name == "rewards" or name in read)
    ]
    batch, bad, _ = clean_signals(batch, judged, policy)
    index, count = dense_groups(group_ids)
    if part is None:
        kept = group_reward_variance(batch.rewards, group_ids) > 0
    elif step is not None and not part.active(step):
        kept = torch.ones(n, dtype=torch.bool, device=batch.device)
    else:
        kept = part.actuator.select(part.score(batch), batch).to(batch.device)
    if bad is not None and policy == "drop":
        kept = kept & ~_any_in_group(bad, index, count)[index]
    return _any_in_group(kept, index, count)[index]


def _group_ids(batch: RolloutBatch) -> torch.Tensor:
    """``batch.group_ids (N,)``; a `BatchError` without them (dynamic sampling judges groups)."""
    if batch.group_ids is None:
        raise BatchError("dynamic sampling judges groups: give the RolloutBatch group_ids (N,), one id per prompt")
    return batch.group_ids


def _any_in_group(rows: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """Whether any row of each group is True: ``rows (N,)`` bool -> ``(G,)`` bool."""
    return segment_max(rows.to(torch.float32), index, count) > 0


def _judging_part(strategy: Strategy | None) -> Part | None:
    """The strategy's select part, checked to judge whole rollouts (None: the reward-spread rule)."""
    part = None if strategy is None else strategy.select
    if part is None:
        return None
    if part.token_level or part.needs_policy:
        what = "scores tokens" if part.token_level else "reads the current policy's log-probs or entropies"
        raise ConfigError(
            f"dynamic_sampling judges whole groups on their rollouts, but the select part "
            f"({part.scorer.name} -> {part.actuator.name}) {what}; use a response- or group-level "
            "select part (e.g. diffband, difffilter) or none (groups whose rewards differ carry signal)"
        )
    return part


# ---------------------------------------------------------------- buffer


@dataclass
class _Round:
    """The signal groups of one generation round (one `SignalGroupBuffer.add`), or a part of them after a split.

    Groups in arrival order, their rows contiguous per group.
    """

    rewards: torch.Tensor  # (M,) the rows' rewards, as given
    sizes: torch.Tensor  # (g,) long, rows per group
    source_rows: torch.Tensor  # (M,) long, each row's index in the batch it was added with
    payload: Any
    round_index: int  # the add() of its step, counted from 0
    born: int  # the buffer's number of takes when it was added

    @property
    def num_groups(self) -> int:
        return self.sizes.shape[0]

    def split(self, groups: int) -> tuple[_Round, _Round]:
        """The first ``groups`` groups and the rest."""
        cut = int(self.sizes[:groups].sum())
        head, tail = slice(0, cut), slice(cut, None)

        def make(sizes: torch.Tensor, rows: slice) -> _Round:
            return _Round(
                self.rewards[rows],
                sizes,
                self.source_rows[rows],
                slice_payload(self.payload, rows),
                self.round_index,
                self.born,
            )

        return make(self.sizes[:groups], head), make(self.sizes[groups:], tail)


@dataclass
class SignalGroups:
    """The groups a `SignalGroupBuffer.take` hands to the loss, carried ones first, rows contiguous per group.

    Attributes:
        payload: the rows' payloads, in take order (tensors concatenated on dim 0, lists joined,
            dicts per key); None if rounds were added without one.
        rewards: ``(M,)`` the rows' rewards.
        group_index: ``(M,)`` long, each row's group in ``[0, num_groups)`` (group ids of different
            rounds may repeat; these do not).
        group_sizes: ``(num_groups,)`` long.
        ages: ``(num_groups,)`` long, steps each group waited in the carry-over buffer (0: generated this step).
        source_round: ``(M,)`` long, the generation round of this step each row came from (-1: carried).
        source_rows: ``(M,)`` long, each row's index in the batch it was added with.
        short: fewer than the wanted groups were in hand (the loop gave up at ``max_rounds``).
        metrics: the step's accounting, keys `DYNAMIC_METRICS`.
    """

    payload: Any
    rewards: torch.Tensor
    group_index: torch.Tensor
    group_sizes: torch.Tensor
    ages: torch.Tensor
    source_round: torch.Tensor
    source_rows: torch.Tensor
    short: bool
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def num_groups(self) -> int:
        return self.group_sizes.shape[0]

    @property
    def n(self) -> int:
        """Rows M."""
        return self.rewards.shape[0]


class SignalGroupBuffer:
    """Collect signal groups over generation rounds, hand out exactly B per step, carry the rest.

    Args:
        strategy: a `Strategy` (or a preset name, config dict or YAML path): its select part
            judges which groups carry signal (`signal_rows`), its ``nan_policy`` how a
            non-finite reward counts, and its ``dynamic_sampling`` part gives the defaults of
            the three options below. None: groups whose rewards differ carry signal, and a
            group with a non-finite reward carries none.
        max_rounds, carry_over, max_age: override the ``dynamic_sampling`` part (see
            `DynamicSamplingConfig` for their meaning and defaults).

    Per step: `start_step`, then `add` per generation round while `should_generate_more`, then
    `take`. Ages are counted in takes (steps). `state_dict` holds the carried groups and counters.

    With a ``pre_select`` part, `add` shows the filter every generated round (its groups with and
    without signal), so it learns which prompts gave no signal; `Strategy.apply` on the groups
    taken then does not show them again. Rounds must then carry ``prompt_keys`` (and ``domains``
    when the prompt sampler has a domain column).
    """

    def __init__(
        self,
        strategy: Any = None,
        *,
        max_rounds: int | None = None,
        carry_over: bool | None = None,
        max_age: Any = _FROM_CONFIG,
    ) -> None:
        if strategy is not None and not isinstance(strategy, Strategy):
            strategy = build_strategy(strategy)
        self.strategy = strategy
        if strategy is not None:
            strategy.bind_signal_buffer(self)  # hosts warn when a dynamic_sampling part has no buffer driving it
        _judging_part(strategy)  # refuse a select part that cannot judge rollouts, at build time
        part = strategy.config.dynamic_sampling if strategy is not None else None
        options = asdict(part or DynamicSamplingConfig())
        if max_rounds is not None:
            options["max_rounds"] = max_rounds
        if carry_over is not None:
            options["carry_over"] = carry_over
        if max_age is not _FROM_CONFIG:
            options["max_age"] = max_age
        self.config = DynamicSamplingConfig(**options)
        self._carried: list[_Round] = []
        self._fresh: list[_Round] = []
        self._takes = 0
        self._step_open = False
        self._wanted = 0
        self._step: int | None = None
        self._step_counts = {"rounds": 0, "generated": 0, "dropped_stale": 0}
        self.totals = {
            "generated": 0,
            "zero_signal_completions": 0,
            "trained_groups": 0,
            "carried": 0,
            "dropped_stale": 0,
            "dropped_extra": 0,
            "short_steps": 0,
            "steps": 0,
        }
        self.metrics: dict[str, float] = {}
        self._empty_payload: Any = None

    # ------------------------------------------------------------ options

    @property
    def max_rounds(self) -> int:
        return self.config.max_rounds

    @property
    def carry_over(self) -> bool:
        return self.config.carry_over

    @property
    def max_age(self) -> int | None:
        return self.config.max_age

    # ------------------------------------------------------------ one step

    def start_step(self, num_groups: int, step: int | None = None) -> None:
        """Open a step that wants ``num_groups`` (B) signal groups; drop carried groups older than ``max_age``.

        ``step`` is the host's step counter, for the select part's warm-up (see `signal_rows`).
        """
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
            raise ConfigError(
                f"start_step(num_groups=...) is the number of groups a step trains (B >= 1); got {num_groups!r}"
            )
        if self._step_open:
            raise BatchError("start_step() was called twice without take() between; call take() to end a step")
        self._step_open, self._wanted, self._step = True, num_groups, step
        self._step_counts = {"rounds": 0, "generated": 0, "dropped_stale": 0}
        if self.max_age is not None:
            stale = [c for c in self._carried if self._takes - c.born > self.max_age]
            if stale:
                self._carried = [c for c in self._carried if self._takes - c.born <= self.max_age]
                dropped = sum(c.num_groups for c in stale)
                self._step_counts["dropped_stale"] = dropped
                self.totals["dropped_stale"] += dropped

    def add(self, batch: RolloutBatch, payload: Any = None) -> torch.Tensor:
        """Add one generation round: keep its signal groups (with their payload rows).

        Args:
            batch: the round's scored rollouts with ``group_ids`` (and ``prompt_keys`` with a
                ``pre_select`` part, which observes the round); under DDP the batch of all ranks.
            payload: what the loop needs back for each row (token ids, masks, ...): a tensor
                ``(N, ...)``, a list of N items, or a dict of those; kept only for signal rows.
                Tensors of every round must share their trailing shape. For checkpoints it must
                hold tensors and plain values only (``torch.load(weights_only=True)``).

        Returns:
            ``(N,)`` bool, the rows of the round's signal groups.
        """
        if not self._step_open:
            raise BatchError(
                "add() outside a step: call start_step(num_groups) first, then add() per generation round, then take()"
            )
        if not isinstance(batch, RolloutBatch):
            raise BatchError(f"add() expects a RolloutBatch; got {type(batch).__name__}")
        rows_in_payload = payload_rows(payload)
        if rows_in_payload is not None and rows_in_payload != batch.n:
            raise BatchError(f"the payload holds {rows_in_payload} rows but the batch {batch.n}; give one per rollout")
        skipping = self.strategy if self.strategy is not None and self.strategy.skips_prompts else None
        if skipping is not None and batch.prompt_keys is None:
            raise BatchError(
                "the strategy's pre_select part learns from every generated round: give add() the "
                "RolloutBatch with prompt_keys=[...] (one per rollout, the keys the prompt sampler "
                "draws by) and domains=[...] when the data has a domain column"
            )
        signal = signal_rows(batch, self.strategy, step=self._step)
        if skipping is not None:  # every generated group, trained or not: the filter sees what it paid for
            skipping.observe_prompt_groups(batch, self._takes if self._step is None else self._step, sync=False)
        if payload is not None:  # what a take of no group hands back: the payload's kind with 0 rows
            self._empty_payload = index_payload(payload, torch.zeros(0, dtype=torch.long))
        self._step_counts["rounds"] += 1
        self._step_counts["generated"] += batch.n
        self.totals["generated"] += batch.n
        self.totals["zero_signal_completions"] += int(batch.n - int(signal.sum()))
        if batch.n and bool(signal.any()):
            self._fresh.append(self._signal_round(batch, signal, payload))
        return signal

    def _signal_round(self, batch: RolloutBatch, signal: torch.Tensor, payload: Any) -> _Round:
        """The signal rows of ``batch``, grouped in order of each group's first row."""
        index, count = dense_groups(_group_ids(batch))
        n = batch.n
        positions = torch.arange(n, device=index.device)
        first = torch.full((count,), n, dtype=torch.long, device=index.device)
        first.scatter_reduce_(0, index, positions, reduce="amin")
        arrival = torch.empty_like(first)
        arrival[torch.argsort(first)] = torch.arange(count, device=index.device)  # group -> its arrival rank
        rows = torch.nonzero(signal.to(index.device)).flatten()
        rows = rows[torch.sort(arrival[index[rows]], stable=True).indices]
        sizes = torch.bincount(arrival[index[rows]], minlength=count)
        sizes = sizes[sizes > 0]
        return _Round(
            batch.rewards.index_select(0, rows.to(batch.device)),
            sizes,
            rows,
            index_payload(payload, rows),
            self._step_counts["rounds"] - 1,
            self._takes,
        )

    @property
    def available(self) -> int:
        """Signal groups in hand now (carried and this step's)."""
        return sum(c.num_groups for c in self._carried) + sum(c.num_groups for c in self._fresh)

    def ready(self, num_groups: int | None = None) -> bool:
        """Whether ``num_groups`` (default: the step's B) signal groups are in hand."""
        return self.available >= (self._wanted if num_groups is None else num_groups)

    @property
    def rounds(self) -> int:
        """Generation rounds added in the open step."""
        return self._step_counts["rounds"]

    def should_generate_more(self) -> bool:
        """Not `ready` and fewer than ``max_rounds`` rounds generated this step."""
        return not self.ready() and self.rounds < self.max_rounds

    def take(self, num_groups: int | None = None) -> SignalGroups:
        """End the step: exactly ``num_groups`` (default B) groups, oldest carried first, then this step's.

        When fewer are in hand it returns them all with ``short=True`` (metric ``dynamic/short``
        1.0). Groups beyond ``num_groups`` go to the carry-over buffer, or are dropped (counted
        in ``totals["dropped_extra"]``) when ``carry_over`` is False.
        """
        if not self._step_open:
            raise BatchError("take() outside a step: call start_step(num_groups) first")
        wanted = self._wanted if num_groups is None else num_groups
        rounds = self._carried + self._fresh
        carried_rounds = len(self._carried)
        taken: list[_Round] = []
        left: list[_Round] = []
        remaining = wanted
        for part in rounds:  # one pass over rounds, not groups
            if remaining >= part.num_groups:
                taken.append(part)
                remaining -= part.num_groups
            elif remaining > 0:
                head, tail = part.split(remaining)
                taken.append(head)
                left.append(tail)
                remaining = 0
            else:
                left.append(part)
        # `taken` is a prefix of `rounds`: its first `carried_rounds` come from the carry-over buffer.
        carried_flags = [position < carried_rounds for position in range(len(taken))]
        result = self._assemble(taken, carried_flags, short=remaining > 0)
        kept_over = sum(c.num_groups for c in left)
        if self.carry_over:
            self._carried = left
        else:
            self._carried = []
            self.totals["dropped_extra"] += kept_over
        self._fresh = []
        self._takes += 1
        self._step_open = False
        self.metrics = result.metrics
        return result

    def _assemble(self, taken: list[_Round], carried_flags: list[bool], short: bool) -> SignalGroups:
        device = taken[0].rewards.device if taken else torch.device("cpu")
        if taken:
            sizes = torch.cat([c.sizes.to(device) for c in taken])
            ages = torch.cat(
                [torch.full((c.num_groups,), self._takes - c.born, dtype=torch.long, device=device) for c in taken]
            )
            rows = [c.rewards.shape[0] for c in taken]
            source_round = torch.cat(
                [
                    torch.full((r,), -1 if flag else c.round_index, dtype=torch.long, device=device)
                    for c, r, flag in zip(taken, rows, carried_flags, strict=True)
                ]
            )
            rewards = torch.cat([c.rewards for c in taken])
            source_rows = torch.cat([c.source_rows.to(device) for c in taken])
            payload = concat_payloads([c.payload for c in taken])
            carried = torch.cat(
                [
                    torch.full((c.num_groups,), flag, dtype=torch.bool, device=device)
                    for c, flag in zip(taken, carried_flags, strict=True)
                ]
            )
        else:
            sizes = ages = source_round = source_rows = torch.zeros(0, dtype=torch.long, device=device)
            rewards, carried = torch.zeros(0, device=device), torch.zeros(0, dtype=torch.bool)
            payload = self._empty_payload
        group_index = torch.repeat_interleave(torch.arange(sizes.shape[0], device=device), sizes)
        n_carried = int(carried.sum())
        metrics = {
            "dynamic/rounds": float(self._step_counts["rounds"]),
            "dynamic/generated": float(self._step_counts["generated"]),
            "dynamic/signal_groups": float(sizes.shape[0]),
            "dynamic/carried": float(n_carried),
            "dynamic/short": float(short),
            "dynamic/carried_age_mean": float(ages[carried].float().mean()) if n_carried else 0.0,
            "dynamic/dropped_stale": float(self._step_counts["dropped_stale"]),
        }
        self.totals["trained_groups"] += sizes.shape[0]
        self.totals["carried"] += n_carried
        self.totals["short_steps"] += int(short)
        self.totals["steps"] += 1
        return SignalGroups(
            payload=payload,
            rewards=rewards,
            group_index=group_index,
            group_sizes=sizes,
            ages=ages,
            source_round=source_round,
            source_rows=source_rows,
            short=short,
            metrics=metrics,
        )

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """The carried groups (with payloads), the step in progress and the counters; tensors and plain values only.

        A copy: changing the buffer later does not change it, and ``torch.load(weights_only=True)``
        reads it back when the payloads hold tensors and plain values. Every tensor is copied on its
        own, so a carried row that is a view of a whole round's tensor saves only its own entries.
        """

        def saved(c: _Round) -> dict[str, Any]:
            return {
                "rewards": c.rewards,
                "sizes": c.sizes,
                "source_rows": c.source_rows,
                "payload": c.payload,
                "round": c.round_index,
                "born": c.born,
            }

        return compact_copy(
            {
                "config": asdict(self.config),
                "carried": [saved(c) for c in self._carried],
                "fresh": [saved(c) for c in self._fresh],
                "takes": self._takes,
                "step_open": self._step_open,
                "wanted": self._wanted,
                "step": self._step,
                "step_counts": dict(self._step_counts),
                "totals": dict(self.totals),
                "empty_payload": self._empty_payload,
            }
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` (the given state is copied, never changed); the options stay this buffer's own."""
        check_state(
            state,
            ("carried", "fresh", "takes", "step_open", "wanted", "step", "step_counts", "totals", "empty_payload"),
            "SignalGroupBuffer",
        )
        state = copy.deepcopy(dict(state))
        try:

            def rounds(saved: list[dict[str, Any]]) -> list[_Round]:
                return [
                    _Round(c["rewards"], c["sizes"], c["source_rows"], c["payload"], int(c["round"]), int(c["born"]))
                    for c in saved
                ]

            self._carried, self._fresh = rounds(state["carried"]), rounds(state["fresh"])
        except (KeyError, TypeError) as error:
            raise StateError(
                f"SignalGroupBuffer.load_state_dict: a saved round of groups is malformed ({error!r}); the state must "
                "come from SignalGroupBuffer.state_dict()"
            ) from error
        self._takes = int(state["takes"])
        self._step_open = bool(state["step_open"])
        self._wanted = int(state["wanted"])
        self._step = state["step"]
        self._step_counts = dict(state["step_counts"])
        self.totals = dict(state["totals"])
        self._empty_payload = state["empty_payload"]

    def __repr__(self) -> str:
        return (
            f"SignalGroupBuffer(max_rounds={self.max_rounds}, carry_over={self.carry_over}, "
            f"max_age={self.max_age}, carried_groups={sum(c.num_groups for c in self._carried)})"
        )
