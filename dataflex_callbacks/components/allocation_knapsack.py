"""`KnapsackAllocator` (``knapsack``; Knapsack RL arXiv 2509.25849, DUET arXiv 2605.08441): a step's completion budget
spread over its candidate prompts by the predicted chance that each prompt's group carries signal.

The spread is a pure tensor function, `spread_budget`, over the values `signal_values` gives (`beta_moment`): a
greedy top-k over the increments of each prompt's value, exact because the value of ``n`` completions is concave in
``n``. The allocator keeps what it learns in a `PassHistory`, as ``screen``'s ``posterior`` rule does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dataflex_callbacks.components.allocation import Allocator, GroupTally
from dataflex_callbacks.components.allocation_memory import PassHistory, restore_generator
from dataflex_callbacks.components.allocation_signal import beta_moment
from dataflex_callbacks.config.params import check_int, check_number
from dataflex_callbacks.errors import BatchError, HostError, ParamError, check_state
from dataflex_callbacks.registry import register
from dataflex_callbacks.rollout.batch import NO_DOMAIN

KNAPSACK_RL = "Knapsack RL arXiv 2509.25849"
DUET = "DUET arXiv 2605.08441"


def signal_values(prior_passes: torch.Tensor, prior_fails: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``(P, K)``: the probability that a group of ``counts[k]`` completions of prompt ``i`` carries signal.

    With the pass rate ``p ~ Beta(prior_passes[i], prior_fails[i])`` (both ``(P,)``, > 0) and ``counts (K,)`` >= 0:
    ``v(n) = 1 - E[p^n] - E[(1 - p)^n]`` (`beta_moment`), and ``v(0) = 0`` (no group, no signal).
    """
    a = prior_passes.to(torch.float64).unsqueeze(1)
    b = prior_fails.to(torch.float64).unsqueeze(1)
    n = counts.to(torch.float64).unsqueeze(0)
    value = 1.0 - beta_moment(a, b, n) - beta_moment(b, a, n)
    return torch.where(n > 0, value.clamp_min(0.0), torch.zeros_like(value))


def spread_budget(values: torch.Tensor, stage: int, slots: int, min_gain: float) -> torch.Tensor:
    """``(P,)`` long: completions per prompt, ``stage`` at a time, maximising the summed value within ``slots`` stages.

    ``values (P, S + 1)``: each prompt's value at ``0, stage, ..., S * stage`` completions. Each stage's gain (the
    increment of a row) is made non-increasing along the row (a running minimum: the value is concave, this only
    guards rounding), then the ``slots`` largest gains above ``min_gain`` are taken: a stable sort of the flattened
    gains, so ties go to the earlier prompt and stage on every rank, and each prompt's taken gains are a prefix of its
    row. This maximises ``sum_i v_i(n_i) - min_gain * n_i / stage`` subject to ``sum_i n_i <= slots * stage``.
    """
    gains = torch.cummin(values[:, 1:] - values[:, :-1], dim=1).values
    flat = gains.flatten()
    order = torch.sort(flat, descending=True, stable=True).indices
    take = torch.zeros_like(flat, dtype=torch.bool)
    chosen = order[: max(slots, 0)]
    take[chosen[flat[chosen] > min_gain]] = True
    return take.view_as(gains).sum(dim=1).to(torch.long) * stage


@register("allocation", "knapsack")
class KnapsackAllocator(Allocator):
    """Spread a per-step completion budget over the step's prompts, most where a group is likeliest to carry signal.

    Knapsack RL (arXiv 2509.25849), DUET (arXiv 2605.08441). One round per step, no pilot. Each prompt's pass rate
    is ``p ~ Beta(a, b)`` (`PassHistory.prior`: its domain's Beta fitted to the run's groups, plus its own earlier
    groups times ``history_weight``; a domain never seen has the uninformed prior). Giving it ``n`` completions is
    worth ``v(n) = 1 - E[p^n] - E[(1 - p)^n]``, the chance its group carries signal (`signal_values`). The step's
    budget of ``floor(budget * P * G)`` completions is spread ``stage`` at a time, each prompt 0..``cap``
    (`spread_budget`), solving::

        maximise  sum_i v_i(n_i) - min_gain * n_i / stage   subject to   sum_i n_i <= floor(budget * P * G)

    A prompt whose next stage gains less than ``min_gain`` gets nothing (a prompt its domain's evidence says always
    or never passes), so a step may generate less than its budget. Of the prompts left at 0, a share ``explore``
    (a seeded draw, alike on every rank) gets ``stage`` completions from the budget, so its domain's estimate follows
    the policy; a step where nothing is chosen gives its most valuable prompt one stage (a host needs rows).

    Groups differ in size (``equal_groups = False``): it runs where ``adaptive`` does (TRL's GRPOTrainer, masked
    filler rows up to TRL's batch; Lightning and your own loop), not in TRL's async trainer nor verl. A step
    generates fewer completions per update than the host's batch: ``alloc/step_generated`` (<= budget x P x G),
    ``alloc/step_budget`` (the step's budget), ``alloc/step_explored`` (prompts given a stage by the explore draw)
    and, in TRL, ``alloc/step_group_size_*`` and ``alloc/step_filler_rows``.

    Args:
        budget: the step's completions as a share of the host's batch (P prompts x G), in (0, 1].
        stage: completions a prompt gets at a time (>= 2: a group of one never carries signal); every count is a
            multiple of it, and it is the smallest count (`first_round`) a host's checks read.
        cap: completions per prompt at most (>= stage; its largest multiple of ``stage`` is used); None: G.
        min_gain: the least gain in signal probability a stage must bring, in [0, 1).
        explore: the share, in [0, 1], of the prompts left at 0 that get one stage anyway.
        prior_strength: the weight, in completions, of the domain's pass rate (>= 0); None fits it per domain from
            the run's groups (`PassHistory`).
        history_weight: the weight of each earlier completion of the same prompt (>= 0; 0 ignores them).
        group_size: G, the host's completions per prompt that ``budget`` is a share of; None takes the host's.
        threshold: a completion passes when its reward is above it.
    """

    paper = f"{KNAPSACK_RL}; {DUET}"
    equal_groups = False
    rounds_per_step = 1
    SEED = 20260925
    """The explore generator's fixed seed: the draws of a run, resumed or not, are the same on every rank."""

    def __init__(
        self,
        budget: float = 0.75,
        stage: int = 2,
        cap: int | None = None,
        min_gain: float = 0.02,
        explore: float = 0.1,
        prior_strength: float | None = None,
        history_weight: float = 1.0,
        group_size: int | None = None,
        threshold: float = 0.5,
    ) -> None:
        super().__init__(threshold)
        self.budget = check_number("budget", budget, low=0.0, high=1.0, low_open=True, finite=True)
        self.stage = check_int("stage", stage, low=2)
        self.cap = None if cap is None else check_int("cap", cap, low=1)
        if self.cap is not None and self.cap < self.stage:
            raise ParamError(
                f"parameter 'cap' must be >= stage ({self.stage}); got {self.cap}: no prompt could get a stage. "
                f"Raise cap to a multiple of {self.stage}, lower stage, or leave cap out (null: the group size)",
                "cap",
            )
        self.min_gain = check_number("min_gain", min_gain, low=0.0, high=1.0, high_open=True, finite=True)
        self.explore = check_number("explore", explore, low=0.0, high=1.0, finite=True)
        self.prior_strength = (
            None if prior_strength is None else check_number("prior_strength", prior_strength, low=0.0, finite=True)
        )
        self.history_weight = check_number("history_weight", history_weight, low=0.0, finite=True)
        self.history = PassHistory()
        self.generator = torch.Generator().manual_seed(self.SEED)
        self._step_budget = self._step_explored = 0.0
        if group_size is not None:
            self.bind_group_size(group_size)

    def bind_group_size(self, group_size: int) -> None:
        """Set G; a ``cap`` left out is G, and must hold a stage."""
        size = self.checked_group_size(group_size)
        if self.cap is None and size < self.stage:
            raise ParamError(
                f"parameter 'stage' ({self.stage}) is above the group size ({size}), the default cap: no prompt "
                f"could get a stage. Use stage 2..{size}, or give a cap",
                "stage",
            )
        self.group_size = size

    def first_round(self) -> int:
        """``stage``: the smallest count a prompt is given (every count is a multiple of it)."""
        return self.stage

    def first_counts(self, keys: Sequence[Any], domains: Sequence[str] | None = None) -> torch.Tensor:
        """``(P,)`` long: the step's budget spread over its ``P`` prompts (`spread_budget`), the explore share added.

        Asked once per step with the same keys in the same order on every rank: it draws one uniform per prompt.
        """
        size, prompts = self.bound_group_size("its budget is a share of P prompts x G"), len(keys)
        labels = [NO_DOMAIN] * prompts if domains is None else [str(d) for d in domains]
        if len(labels) != prompts:
            raise BatchError(f"KnapsackAllocator.first_counts got {prompts} prompt keys but {len(labels)} domains")
        budget = int(self.budget * prompts * size + 1e-9)  # 0.3 * 10 is 2.9999999999999996
        slots = budget // self.stage
        draws = torch.rand(prompts, generator=self.generator, dtype=torch.float64)
        self._step_budget, self._step_explored = float(budget), 0.0
        if prompts == 0:
            return torch.zeros(0, dtype=torch.long)
        if slots == 0:
            raise ParamError(
                f"allocation 'knapsack': a budget of {self.budget} x {prompts} prompts x {size} = {budget} "
                f"completions holds no stage of {self.stage}; raise budget to >= {self.stage / (prompts * size):.4g} "
                "or lower stage",
                "budget",
            )
        stages = (self.cap if self.cap is not None else size) // self.stage
        prior_passes, prior_fails = self.history.prior(keys, labels, self.prior_strength, self.history_weight)
        values = signal_values(prior_passes, prior_fails, torch.arange(stages + 1) * self.stage)
        counts = spread_budget(values, self.stage, slots, self.min_gain)
        explored = (counts == 0) & (draws < self.explore)
        explored &= torch.cumsum(explored.long(), 0) <= slots  # at most the budget's stages
        if bool(explored.any()):  # their stages come out of the budget: spread the rest over the others
            values = values.masked_fill(explored.unsqueeze(1), 0.0)
            counts = spread_budget(values, self.stage, slots - int(explored.sum()), self.min_gain)
            counts = counts + explored.long() * self.stage
        if not bool(counts.any()):  # a host needs rows: the most valuable prompt's first stage
            counts[int(torch.argmax(values[:, 1]))] = self.stage
        if int(counts.sum()) > min(budget, prompts * size):
            raise HostError(
                f"KnapsackAllocator spread {int(counts.sum())} completions over a budget of {budget} "
                f"({prompts} prompts x G = {size}); this is a bug, please report it"
            )
        self._step_explored = float(explored.sum())
        return counts

    def next_round(
        self, tally: GroupTally, keys: Sequence[Any] | None = None, domains: Sequence[str] | None = None
    ) -> torch.Tensor:
        """Zeros: one round per step."""
        return torch.zeros_like(tally.trials, dtype=torch.long)

    def observe(self, tally: GroupTally, keys: Sequence[Any], domains: Sequence[str] | None = None) -> None:
        """Record each generated group's passes of its trials in the `PassHistory` (every completion is first-round)."""
        rows = torch.nonzero(tally.trials.cpu() > 0).flatten()
        labels = [NO_DOMAIN] * len(keys) if domains is None else [str(d) for d in domains]
        picked = rows.tolist()
        self.history.record(
            [keys[i] for i in picked], [labels[i] for i in picked], tally.passes.cpu()[rows], tally.trials.cpu()[rows]
        )

    def metrics(self) -> dict[str, float]:
        """The `Allocator` counts, with the step's budget (``alloc/step_budget``) and explored prompts
        (``alloc/step_explored``)."""
        out = super().metrics()
        out["alloc/step_budget"] = self._step_budget
        out["alloc/step_explored"] = self._step_explored
        return out

    def state_dict(self) -> dict:
        return {**super().state_dict(), "history": self.history.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        check_state(state, ("history", "generator"), type(self).__name__)
        restore_generator(self.generator, state, "KnapsackAllocator")
        super().load_state_dict(state)
        self.history.load_state_dict(state["history"])
