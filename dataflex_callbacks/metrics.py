"""Per-domain rollout statistics and held-out accuracy as torchmetrics `Metric` objects, and `RunSummary`, the
line every host prints when training ends.

Both accumulate per-domain sums in declared states reduced with ``sum``, so under
torch.distributed ``compute()`` returns the statistics of all ranks' rows, and a host that logs
them (or resets them at an epoch boundary) needs no synchronisation code of its own. The math is
one pure function, `domain_reward_sums`; the classes hold the domains and the running sums.

A row whose reward is NaN or infinite is no observation (as in `DomainTracker`): it enters no
mean and no share, and is counted under ``nonfinite_rewards/<domain>``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric

from dataflex_callbacks.config.params import check_number
from dataflex_callbacks.config.proportions import check_domains
from dataflex_callbacks.errors import BatchError, user_stacklevel
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.rollout.decision import Decision
from dataflex_callbacks.rollout.groups import dense_groups, segment_max, segment_min

# Columns of `domain_reward_sums`, in order; every one is a state reduced with "sum".
SUMS = ("responses", "reward_sum", "solved", "kept", "nonfinite")


def domain_reward_sums(
    rewards: torch.Tensor,
    domain_index: torch.Tensor,
    num_domains: int,
    keep: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    threshold: float = 0.5,
) -> torch.Tensor:
    """Per-domain sums of one batch: ``(K, 5)`` float64 in the order of `SUMS`.

    Args:
        rewards: ``(N,)`` rewards; non-finite rows are counted in ``nonfinite`` only.
        domain_index: ``(N,)`` int, each row's domain in ``range(num_domains)``.
        num_domains: ``K``.
        keep: ``(N,)`` bool, the rows the strategy kept; None keeps every row.
        weights: ``(N,)`` how many responses each row stands for; None is 1 per row.
        threshold: a response is solved when its reward is above it (as `group_solve_rate`).
    """
    rewards = rewards.detach().to(torch.float64).reshape(-1)
    index = domain_index.to(device=rewards.device, dtype=torch.long).reshape(-1)
    if index.shape != rewards.shape:
        raise BatchError(
            f"got {rewards.shape[0]} rewards but {index.shape[0]} domain labels; pass one label per reward"
        )
    weight = (
        torch.ones_like(rewards) if weights is None else weights.detach().to(rewards.device, torch.float64).reshape(-1)
    )
    if weights is not None and weight.shape != rewards.shape:  # ones_like(rewards) fits by construction
        raise BatchError(
            f"weights must have one value per reward ({rewards.shape[0]}); got shape {tuple(weights.shape)}"
        )
    if keep is not None and keep.numel() != rewards.numel():
        raise BatchError(f"keep must have one value per reward ({rewards.shape[0]}); got shape {tuple(keep.shape)}")
    finite = torch.isfinite(rewards)
    observed = weight.where(finite, 0.0)
    kept = observed if keep is None else observed * keep.detach().to(rewards.device).reshape(-1)
    columns = (
        observed,
        observed * rewards.where(finite, 0.0),
        observed * (rewards > threshold),
        kept,
        weight.where(~finite, 0.0),
    )
    sums = torch.zeros(num_domains, len(SUMS), dtype=torch.float64, device=rewards.device)
    return sums.index_add_(0, index, torch.stack(columns, dim=1))


class _DomainSums(Metric):
    """Declared per-domain states (`SUMS`, each ``(K,)`` float64, reduced with ``sum``) and the label lookup."""

    full_state_update = False
    is_differentiable = False
    # The states `add_state` declares (one per name in `SUMS`), annotated as torchmetrics' own metrics do.
    responses: torch.Tensor
    reward_sum: torch.Tensor
    solved: torch.Tensor
    kept: torch.Tensor
    nonfinite: torch.Tensor

    def __init__(self, domains: Sequence[str], threshold: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.domains = check_domains(domains, f"{type(self).__name__} domains")
        self.threshold = check_number("threshold", threshold)
        self._label_index = {d: i for i, d in enumerate(self.domains)}
        for name in SUMS:
            self.add_state(name, default=torch.zeros(len(self.domains), dtype=torch.float64), dist_reduce_fx="sum")

    def _domain_index(self, domains: Sequence[str] | torch.Tensor) -> torch.Tensor:
        if isinstance(domains, torch.Tensor):
            return domains
        try:
            return torch.tensor([self._label_index[str(d)] for d in domains], dtype=torch.long)
        except KeyError as missing:
            raise BatchError(
                f"{type(self).__name__} got domain {missing.args[0]!r}, which it was not built with; "
                f"known domains: {self.domains}. Build it with every domain of the data"
            ) from None

    def _add(
        self,
        rewards: torch.Tensor,
        domains: Sequence[str] | torch.Tensor,
        keep: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> None:
        rewards = torch.as_tensor(rewards)
        sums = domain_reward_sums(
            rewards.to(self.device),
            self._domain_index(domains),
            len(self.domains),
            keep=keep,
            weights=weights,
            threshold=self.threshold,
        )
        for column, name in enumerate(SUMS):
            getattr(self, name).add_(sums[:, column])


class DomainRewardStats(_DomainSums):
    """Per-domain rollout statistics over any number of batches: responses, mean reward, solve and kept shares.

    ``compute()`` returns floats keyed ``selection_reward/<d>`` (the name `Strategy` metrics use),
    ``solve_rate/<d>``, ``kept_frac/<d>``, ``responses/<d>`` and ``nonfinite_rewards/<d>``; a domain
    without a finite response has only the two counts.

    Args:
        domains: every domain label the batches can hold, fixed for the metric's life.
        threshold: a response is solved when its reward is above it.
        kwargs: torchmetrics options (``sync_on_compute``, ``process_group``, ...).
    """

    higher_is_better = None

    def update(
        self,
        rewards: torch.Tensor,
        domains: Sequence[str] | torch.Tensor,
        keep: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> None:
        """Add one batch: ``rewards`` ``(N,)``, ``domains`` (N labels, or ``(N,)`` indices into `domains`).

        ``keep`` ``(N,)`` bool marks the rows the strategy kept (None: all). ``weights`` ``(N,)``
        says how many responses a row stands for, e.g. one batch's mean reward of a domain weighed
        by the batch's responses; None counts each row once.
        """
        self._add(rewards, domains, keep=keep, weights=weights)

    def compute(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for i, domain in enumerate(self.domains):
            responses = float(self.responses[i])
            if responses:
                values[f"selection_reward/{domain}"] = float(self.reward_sum[i]) / responses
                values[f"solve_rate/{domain}"] = float(self.solved[i]) / responses
                values[f"kept_frac/{domain}"] = float(self.kept[i]) / responses
            values[f"responses/{domain}"] = responses
            values[f"nonfinite_rewards/{domain}"] = float(self.nonfinite[i])
        return values


class HeldOutAccuracy(_DomainSums):
    """Held-out accuracy per domain and ``overall`` (mean score over all rows) from per-row scores.

    ``compute()`` returns ``{<domain>: accuracy, ..., "overall": accuracy}`` with only the domains
    that had a scored row; ``overall`` is 0.0 before any row. A non-finite score is no observation.

    Args:
        domains: every domain label the rows can hold.
        kwargs: torchmetrics options (``sync_on_compute``, ``process_group``, ...).
    """

    higher_is_better = True

    def __init__(self, domains: Sequence[str], **kwargs: Any) -> None:
        super().__init__(domains, **kwargs)

    def update(self, scores: torch.Tensor, domains: Sequence[str] | torch.Tensor) -> None:
        """Add scored rows: ``scores`` ``(N,)`` (1.0 correct, 0.0 wrong, or partial credit) and their domains."""
        self._add(scores, domains)

    def compute(self) -> dict[str, float]:
        values = {
            d: float(self.reward_sum[i]) / float(self.responses[i])
            for i, d in enumerate(self.domains)
            if float(self.responses[i])
        }
        total = float(self.responses.sum())
        values["overall"] = float(self.reward_sum.sum()) / total if total else 0.0
        return values


# ---------------------------------------------------------------- staleness (asynchronous hosts)

STALENESS_SUMS = ("arrived", "dropped_stale", "consumed", "staleness_sum", "dropped_strategy")
"""Per-domain states of `DomainStalenessStats`, each reduced with ``sum``."""


class StaleDropBiasWarning(UserWarning):
    """One domain loses far more of its samples to the staleness limit than the others (shown once)."""


def stale_drop_bias(shares: dict[str, float], ratio: float = 3.0, min_share: float = 0.1) -> str | None:
    """The domain whose stale-drop share is far above the others', or None.

    A domain is flagged when its share is at least ``min_share`` and at least ``ratio`` times the
    mean share of the other domains (so two domains, one at 0.3 and one at 0.05, flag the first).
    Needs two domains or more; the highest share is the one tested.
    """
    if len(shares) < 2:
        return None
    worst = max(shares, key=lambda d: (shares[d], d))
    others = [v for d, v in shares.items() if d != worst]
    rest = sum(others) / len(others)
    return worst if shares[worst] >= min_share and shares[worst] >= ratio * rest else None


class DomainStalenessStats(Metric):
    """Per-domain staleness of an asynchronous host: mean staleness, stale-drop share, strategy-drop share.

    ``update`` takes the samples that arrived from the rollout queue: each one's domain, its
    staleness when it was taken, and whether the host dropped it as stale (over its
    ``max_staleness``) or the strategy dropped it. ``compute()`` returns floats keyed
    ``staleness/mean/<d>`` (over the samples consumed, i.e. not dropped as stale),
    ``staleness/dropped_stale_frac/<d>`` (of the samples that arrived) and
    ``staleness/dropped_strategy_frac/<d>`` (of the samples consumed). `check_bias` warns once
    when one domain's stale-drop share is far above the others' (`stale_drop_bias`): samples
    that take long to generate (hard problems, long answers) come back staler, so a staleness
    limit drops them more and training drifts toward the fast, easy ones.

    Args:
        domains: every domain label the samples can hold.
        ratio, min_share: the alarm's rule (`stale_drop_bias`).
        sees_stale_drops: False for a host whose stale samples are dropped before it sees them (verl evicts
            them in its replay buffer): ``update`` then takes no stale flags and ``compute`` reports no
            stale-drop share rather than a share of 0.
        kwargs: torchmetrics options (``sync_on_compute``, ``process_group``, ...).
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = None
    # The states `add_state` declares (one per name in `STALENESS_SUMS`).
    arrived: torch.Tensor
    dropped_stale: torch.Tensor
    consumed: torch.Tensor
    staleness_sum: torch.Tensor
    dropped_strategy: torch.Tensor

    def __init__(
        self,
        domains: Sequence[str],
        ratio: float = 3.0,
        min_share: float = 0.1,
        sees_stale_drops: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.domains = check_domains(domains, "DomainStalenessStats domains")
        self.sees_stale_drops = bool(sees_stale_drops)
        self.ratio = check_number("ratio", ratio, low=1.0)
        self.min_share = check_number("min_share", min_share, low=0.0, high=1.0)
        self._label_index = {d: i for i, d in enumerate(self.domains)}
        self.warned = False
        for name in STALENESS_SUMS:
            self.add_state(name, default=torch.zeros(len(self.domains), dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self,
        domains: Sequence[str],
        staleness: torch.Tensor,
        dropped_stale: torch.Tensor | None = None,
        dropped_strategy: torch.Tensor | None = None,
    ) -> None:
        """Add arrived samples: ``domains`` (N labels), ``staleness`` ``(N,)``, ``dropped_stale`` ``(N,)`` bool
        (None: none dropped; required when the host sees stale drops).

        ``dropped_strategy`` ``(N,)`` bool marks consumed samples the strategy dropped (None: none);
        it is ignored on rows dropped as stale.
        """
        if dropped_stale is None and self.sees_stale_drops:
            raise BatchError(
                "DomainStalenessStats.update needs dropped_stale (N,) bool from a host that sees stale "
                "drops; build it with sees_stale_drops=False where the host never sees them"
            )
        if dropped_stale is not None and not self.sees_stale_drops:
            raise BatchError("DomainStalenessStats was built with sees_stale_drops=False; pass no dropped_stale")
        try:
            index = torch.tensor([self._label_index[str(d)] for d in domains], dtype=torch.long, device=self.device)
        except KeyError as missing:
            raise BatchError(
                f"DomainStalenessStats got domain {missing.args[0]!r}, which it was not built with; "
                f"known domains: {self.domains}. Build it with every domain of the data"
            ) from None
        n = index.shape[0]
        staleness = torch.as_tensor(staleness).to(self.device, torch.float64).reshape(-1)
        stale = (
            torch.zeros(n, dtype=torch.float64, device=self.device)
            if dropped_stale is None
            else torch.as_tensor(dropped_stale).to(self.device, torch.float64).reshape(-1)
        )
        strategy = (
            torch.zeros(n, dtype=torch.float64, device=self.device)
            if dropped_strategy is None
            else torch.as_tensor(dropped_strategy).to(self.device, torch.float64).reshape(-1)
        )
        if not staleness.shape[0] == stale.shape[0] == strategy.shape[0] == n:
            raise BatchError(
                f"DomainStalenessStats.update got {n} domains, {staleness.shape[0]} staleness values, "
                f"{stale.shape[0]} stale flags and {strategy.shape[0]} strategy flags; pass one per sample"
            )
        consumed = 1.0 - stale
        columns = (
            torch.ones(n, dtype=torch.float64, device=self.device),
            stale,
            consumed,
            staleness * consumed,
            strategy * consumed,
        )
        for name, column in zip(STALENESS_SUMS, columns, strict=True):
            getattr(self, name).index_add_(0, index, column)

    def compute(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for i, domain in enumerate(self.domains):
            arrived, consumed = float(self.arrived[i]), float(self.consumed[i])
            if consumed:
                values[f"staleness/mean/{domain}"] = float(self.staleness_sum[i]) / consumed
                values[f"staleness/dropped_strategy_frac/{domain}"] = float(self.dropped_strategy[i]) / consumed
            if arrived and self.sees_stale_drops:
                values[f"staleness/dropped_stale_frac/{domain}"] = float(self.dropped_stale[i]) / arrived
        return values

    def stale_drop_shares(self) -> dict[str, float]:
        """Each domain's share of its arrived samples dropped as stale (domains with arrivals only)."""
        return {
            d: float(self.dropped_stale[i]) / float(self.arrived[i])
            for i, d in enumerate(self.domains)
            if float(self.arrived[i])
        }

    def check_bias(self) -> str | None:
        """Warn once (`StaleDropBiasWarning`) when one domain's stale-drop share is far above the others';
        the domain or None."""
        shares = self.stale_drop_shares()
        domain = stale_drop_bias(shares, self.ratio, self.min_share)
        if domain is not None and not self.warned:
            self.warned = True
            seen = ", ".join(f"{d} {v:.2f}" for d, v in sorted(shares.items()))
            warnings.warn(
                StaleDropBiasWarning(
                    f"dataflex: domain {domain!r} loses {shares[domain]:.0%} of its samples to the staleness limit, "
                    f"far more than the others (stale-drop shares: {seen}): its samples take longer to generate, so "
                    "training drifts toward the faster, easier domains. Raise max_staleness, lower max_inflight_tasks, "
                    "or keep stale samples at a discount (reweight: staleness_discount) instead of dropping them. "
                    "Shown once."
                ),
                stacklevel=user_stacklevel(),
            )
        return domain


# ---------------------------------------------------------------- the run's summary (every host, at train end)


def signal_groups_kept(rewards: torch.Tensor, group_ids: torch.Tensor, keep: torch.Tensor) -> tuple[int, int]:
    """``(signal groups kept, groups)`` of one batch.

    A group carries a learning signal when its finite rewards are not all equal (a NaN or infinite
    reward is no observation); it is kept when the decision keeps at least one of its rows.

    Args:
        rewards: ``(N,)`` the rewards the strategy decided on.
        group_ids: ``(N,)`` one id per prompt.
        keep: ``(N,)`` bool, the rows the decision kept.
    """
    if rewards.numel() == 0:
        return 0, 0
    index, groups = dense_groups(group_ids.to(rewards.device))
    values = rewards.detach().to(torch.float64)
    finite = torch.isfinite(values)
    low = segment_min(values.where(finite, math.inf), index, groups)
    high = segment_max(values.where(finite, -math.inf), index, groups)
    kept = segment_max(keep.to(device=values.device, dtype=torch.float64), index, groups) > 0
    return int(((high > low) & kept).sum()), groups


class RunSummary:
    """What the strategy did over a run, in the one line a host prints when training ends (`line`).

    It counts the steps, the steps that kept nothing (they train nothing; the `DroppedAllWarning`
    says why, once), the mean kept fraction of a step's responses, and the signal groups trained
    (`signal_groups_kept`). A host calls `update` with each decision made on the batch of all ranks,
    and `end_step` when its optimizer steps; a host that decides once per step calls both
    together. The decisions are the same on every rank, so nothing is reduced across ranks; the
    main process prints.

    The counts start when the object is built (or `reset`); on a resumed run, the steps since the resume.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every step (a host calls it when training starts)."""
        self.steps = 0
        self.empty_steps = 0
        self.kept_frac_sum = 0.0
        self.signal_groups = 0
        self.groups = 0
        self.groups_known = True
        self._rows = 0
        self._kept = 0
        self._trained = False
        self._open = False

    def update(self, batch: RolloutBatch, decision: Decision) -> None:
        """Add one decision of the current step: ``batch`` the `RolloutBatch` decided on (``rewards (N,)``,
        ``group_ids (N,)`` or None), ``decision`` its `Decision` (``keep (N,)``, ``metrics``)."""
        keep = decision.keep.detach().reshape(-1).bool()
        if keep.numel() != batch.n:
            raise BatchError(
                f"RunSummary.update got a decision over {keep.numel()} rows for a batch of {batch.n}; pass the "
                "decision made on that batch (of all ranks), not one rank's part of it"
            )
        kept = int(keep.sum())
        self._rows += batch.n
        self._kept += kept
        # A step whose kept rows hold no token (token-level selection) trains nothing too: the metric says so.
        self._trained = self._trained or (kept > 0 and not decision.metrics.get("dropped_all", 0.0))
        self._open = True
        if batch.group_ids is None:
            self.groups_known = False
        else:
            signal, groups = signal_groups_kept(batch.rewards, batch.group_ids, keep)
            self.signal_groups += signal
            self.groups += groups

    def end_step(self) -> None:
        """Close the current step (a no-op when nothing was added since the last one)."""
        if not self._open:
            return
        self.steps += 1
        self.empty_steps += not self._trained
        self.kept_frac_sum += self._kept / self._rows if self._rows else 0.0
        self._rows, self._kept, self._trained, self._open = 0, 0, False, False

    @property
    def mean_kept_frac(self) -> float:
        """The mean over steps of the share of a step's responses kept (0.0 before any step)."""
        return self.kept_frac_sum / self.steps if self.steps else 0.0

    def line(self, strategy: str, warning: str = "DroppedAllWarning") -> str:
        """The console line at train end; ``strategy`` is the strategy's name, ``warning`` the class of the warning
        the host shows at the first step that trained nothing."""
        head = f"dataflex: train end: strategy {strategy!r}: "
        if not self.steps:
            return head + "no step was decided"
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        signal = (
            f"{self.signal_groups} signal groups trained (of {self.groups} groups)"
            if self.groups_known
            else "signal groups: not known (the batches carry no group_ids)"
        )
        text = f"{head}{steps}, {self.empty_steps} kept nothing, mean kept fraction {self.mean_kept_frac:.2f}, {signal}"
        if self.empty_steps == self.steps:
            text += f"; no step trained anything: the first such step's {warning} names the cause and the fix"
        return text
