"""`StepMetrics`: the strategy's metrics of one optimizer step, aggregated over its micro-batches.

With gradient accumulation (``Trainer(accumulate_grad_batches=k)``, or manual optimisation that
steps every ``k`` batches) the strategy decides once per micro-batch. What is logged for the step:

- per-batch statistics (``kept_frac``, ``ess``, ``weight_*``, ``reward/<domain>``, the pre-rollout
  shares, ...): the mean over the micro-batches, weighted by their responses, with torchmetrics'
  ``MeanMetric`` (NaN values, e.g. before a first observation, are left out);
- running state (``mix/*``, the other ``prerollout/*`` values): the value after the last micro-batch.

The callback logs them with ``self.log(on_step=True, on_epoch=True)``: Lightning names them
``<name>_step`` and ``<name>_epoch`` in the logger; the epoch value is the responses-weighted mean
over the epoch's steps, except for running totals (`COUNTERS`), whose epoch value is their maximum.
"""

from __future__ import annotations

from typing import Mapping

from torchmetrics.aggregation import MeanMetric

STATE_PREFIXES = ("mix/", "prerollout/")
PER_BATCH = ("prerollout/zero_variance_share", "prerollout/noisy_share")
COUNTERS = ("prerollout/skipped_prompts", "prerollout/completions_saved")


def is_state(name: str) -> bool:
    """Whether metric ``name`` is running state (log the latest value) rather than a per-batch statistic."""
    return name.startswith(STATE_PREFIXES) and name not in PER_BATCH


class StepMetrics:
    """Collects micro-batch metrics until the optimizer steps; `flush` returns the step's values."""

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
