"""What the callback logs for one optimizer step, aggregated over its gradient-accumulation micro-batches.

With gradient accumulation (``Trainer(accumulate_grad_batches=k)``, or manual optimisation that
steps every ``k`` batches) the strategy decides once per micro-batch. What is logged for the step:

- per-batch statistics (``kept_frac``, ``ess``, ``weight_*``, the pre-rollout shares, ...): the
  mean over the micro-batches, weighted by their responses, with torchmetrics' ``MeanMetric``
  (NaN values, e.g. before a first observation, are left out); `StepMetrics` holds them;
- running state (``mix/*``, the other ``pre_select/*`` values): the value after the last micro-batch;
- per-domain statistics (``selection_reward/<d>``, ``solve_rate/<d>``, ``kept_frac/<d>``, ``responses/<d>``,
  ``nonfinite_rewards/<d>``): computed from the step's rows themselves by the core's
  `DomainRewardStats`, so ``selection_reward/<d>`` is the mean over the domain's own responses of the step.
  The strategy's per-micro-batch ``selection_reward/<d>`` means are not used.

The callback logs them with ``self.log(on_step=True, on_epoch=True)``: Lightning names them
``<name>_step`` and ``<name>_epoch`` in the logger. The epoch value of a statistic is its mean
over the epoch's steps weighted by their responses (for a domain's shares: the domain's
responses, which makes it the share over all the epoch's rows of the domain); running totals
(`COUNTERS`) log their maximum and per-step counts (`DOMAIN_COUNTS`) their sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torchmetrics.aggregation import MeanMetric

from dataflex_callbacks.metrics import SUMS, DomainRewardStats

STATE_PREFIXES = ("mix/", "pre_select/")
PER_BATCH = ("pre_select/zero_variance_share", "pre_select/noisy_share")
COUNTERS = ("pre_select/skipped_prompts", "pre_select/completions_redirected")
# The per-domain names of `DomainRewardStats.compute`: shares (a mean over the domain's responses) and counts.
DOMAIN_SHARES = ("selection_reward", "solve_rate", "kept_frac")
DOMAIN_COUNTS = ("responses", "nonfinite_rewards")
DOMAIN_REWARD = "selection_reward/"


def is_state(name: str) -> bool:
    """Whether metric ``name`` is running state (log the latest value) rather than a per-batch statistic."""
    return name.startswith(STATE_PREFIXES) and name not in PER_BATCH


class StepMetrics:
    """Collects the strategy's micro-batch metrics until the optimizer steps; `flush` returns the step's values.

    ``selection_reward/<domain>`` values are skipped: the step's per-domain statistics come from its rows
    (see `cover_domains` and `DomainRewardStats`), not from micro-batch means.
    """

    def __init__(self) -> None:
        self._means: dict[str, MeanMetric] = {}
        self._updated: list[str] = []
        self._latest: dict[str, float] = {}
        self.responses = 0

    @property
    def pending(self) -> bool:
        """Whether metrics of micro-batches not logged yet are held."""
        return bool(self._updated or self._latest)

    def update(self, metrics: Mapping[str, float], responses: int) -> None:
        """Add one micro-batch's metrics; ``responses`` (its row count over all ranks) weighs its statistics."""
        weight = float(max(int(responses), 1))
        for name, value in metrics.items():
            if name.startswith(DOMAIN_REWARD):
                continue
            if is_state(name):
                self._latest[name] = float(value)
                continue
            mean = self._means.get(name)
            if mean is None:
                # The values are already global (decided on the gathered batch): no cross-rank sync.
                mean = self._means[name] = MeanMetric(nan_strategy="ignore", sync_on_compute=False)
            if name not in self._updated:
                self._updated.append(name)
            mean.update(float(value), weight)
        self.responses += int(responses)

    def flush(self) -> tuple[dict[str, float], int]:
        """The step's values and its responses, and start the next step empty."""
        values = {}
        for name in self._updated:
            mean = self._means[name]
            values[name] = float(mean.compute())
            mean.reset()
        values.update(self._latest)
        responses = self.responses
        self._updated, self._latest, self.responses = [], {}, 0
        return values, responses


def cover_domains(
    stats: DomainRewardStats | None, labels: Sequence[str], device: torch.device | str = "cpu"
) -> DomainRewardStats:
    """``stats`` extended by the labels it lacks (in first-seen order), with the sums it holds carried over.

    Under DDP every rank passes the same labels (those of the gathered batch), so every rank's
    metric has the same domains in the same order and the states line up for the sum-reduction.
    Returns ``stats`` itself when it already knows every label.
    """
    known = [] if stats is None else list(stats.domains)
    new = [label for label in dict.fromkeys(str(label) for label in labels) if label not in known]
    if stats is not None and not new:
        return stats
    grown = DomainRewardStats(known + new).to(device)
    if stats is not None:
        for name in SUMS:
            getattr(grown, name)[: len(known)] += getattr(stats, name).to(grown.device)
    return grown


def domain_log_groups(values: Mapping[str, float], domains: Sequence[str]) -> list[tuple[dict[str, float], int, str]]:
    """`DomainRewardStats.compute` output as ``(values, batch_size, reduce_fx)`` groups for ``log_dict``.

    A domain's shares are weighed by its own responses (so Lightning's epoch mean is the share over
    the epoch's rows of that domain); its counts are summed over the epoch.
    """
    groups = []
    for domain in domains:
        responses = int(round(values.get(f"responses/{domain}", 0.0)))
        shares = {
            f"{name}/{domain}": values[f"{name}/{domain}"] for name in DOMAIN_SHARES if f"{name}/{domain}" in values
        }
        if shares:
            groups.append((shares, max(responses, 1), "mean"))
        groups.append(({f"{name}/{domain}": values[f"{name}/{domain}"] for name in DOMAIN_COUNTS}, 1, "sum"))
    return groups
