"""Per-domain rollout statistics and held-out accuracy as torchmetrics `Metric` objects.

Both accumulate per-domain sums in declared states reduced with ``sum``, so under
torch.distributed ``compute()`` returns the statistics of all ranks' rows, and a host that logs
them (or resets them at an epoch boundary) needs no synchronisation code of its own. The math is
one pure function, `domain_reward_sums`; the classes hold the domains and the running sums.

A row whose reward is NaN or infinite is no observation (as in `DomainTracker`): it enters no
mean and no share, and is counted under ``nonfinite_rewards/<domain>``.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torchmetrics import Metric

from .errors import BatchError
from .params import check_number
from .proportions import check_domains

# Columns of `domain_reward_sums`, in order; every one is a state reduced with "sum".
SUMS = ("responses", "reward_sum", "solved", "kept", "nonfinite")


def domain_reward_sums(rewards: torch.Tensor, domain_index: torch.Tensor, num_domains: int,
                       keep: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                       threshold: float = 0.5) -> torch.Tensor:
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
        raise BatchError(f"got {rewards.shape[0]} rewards but {index.shape[0]} domain labels; pass one label per reward")
    weight = torch.ones_like(rewards) if weights is None else weights.detach().to(rewards.device, torch.float64).reshape(-1)
    if weight.shape != rewards.shape:
        raise BatchError(f"weights must have one value per reward ({rewards.shape[0]}); got shape {tuple(weights.shape)}")
    if keep is not None and keep.numel() != rewards.numel():
        raise BatchError(f"keep must have one value per reward ({rewards.shape[0]}); got shape {tuple(keep.shape)}")
    finite = torch.isfinite(rewards)
    observed = weight.where(finite, 0.0)
    kept = observed if keep is None else observed * keep.detach().to(rewards.device).reshape(-1)
    columns = (observed, observed * rewards.where(finite, 0.0), observed * (rewards > threshold), kept,
               weight.where(~finite, 0.0))
    sums = torch.zeros(num_domains, len(SUMS), dtype=torch.float64, device=rewards.device)
    return sums.index_add_(0, index, torch.stack(columns, dim=1))


class _DomainSums(Metric):
    """Declared per-domain states (`SUMS`, each ``(K,)`` float64, reduced with ``sum``) and the label lookup."""

    full_state_update = False
    is_differentiable = False

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
            raise BatchError(f"{type(self).__name__} got domain {missing.args[0]!r}, which it was not built with; "
                             f"known domains: {self.domains}. Build it with every domain of the data") from None

    def _add(self, rewards: torch.Tensor, domains: Sequence[str] | torch.Tensor, keep: torch.Tensor | None = None,
             weights: torch.Tensor | None = None) -> None:
        rewards = torch.as_tensor(rewards)
        sums = domain_reward_sums(rewards.to(self.device), self._domain_index(domains), len(self.domains),
                                  keep=keep, weights=weights, threshold=self.threshold)
        for column, name in enumerate(SUMS):
            getattr(self, name).add_(sums[:, column])


class DomainRewardStats(_DomainSums):
    """Per-domain rollout statistics over any number of batches: responses, mean reward, solve and kept shares.

    ``compute()`` returns floats keyed ``reward/<d>`` (the name `Strategy` metrics use),
    ``solve_rate/<d>``, ``kept_frac/<d>``, ``responses/<d>`` and ``nonfinite_rewards/<d>``; a domain
    without a finite response has only the two counts.

    Args:
        domains: every domain label the batches can hold, fixed for the metric's life.
        threshold: a response is solved when its reward is above it.
        kwargs: torchmetrics options (``sync_on_compute``, ``process_group``, ...).
    """

    higher_is_better = None

    def update(self, rewards: torch.Tensor, domains: Sequence[str] | torch.Tensor, keep: torch.Tensor | None = None,
               weights: torch.Tensor | None = None) -> None:
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
                values[f"reward/{domain}"] = float(self.reward_sum[i]) / responses
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
        values = {d: float(self.reward_sum[i]) / float(self.responses[i])
                  for i, d in enumerate(self.domains) if float(self.responses[i])}
        total = float(self.responses.sum())
        values["overall"] = float(self.reward_sum.sum()) / total if total else 0.0
        return values
