"""`DomainTracker`: sliding-window per-domain training statistics that drive the mixers.

Each `update` turns a batch into per-domain *sums* (the declared state below, all reduced with
``sum``), all-reduces them when torch.distributed is running, and only then derives means; so
every rank holds identical statistics by construction.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .batch import RolloutBatch
from .errors import BatchError, ConfigError
from .groups import dense_groups
from .params import check_int

# Per-step sums gathered per domain; every one is reduced across ranks with "sum".
_STEP_SUMS = ("count", "reward_sum", "abs_adv_sum", "group_var_sum", "group_count", "nonfinite")
_WINDOW_STATS = ("reward", "abs_advantage", "group_variance", "count", "step")


class DomainTracker:
    """Per-domain sliding window (default 50 observations) of reward, |advantage|, group variance, counts.

    Args:
        domains: the domain labels, in a fixed order.
        window: observations kept per domain (one observation = one `update` in which the domain
            appeared).
    """

    def __init__(self, domains: Sequence[str], window: int = 50):
        domains = list(domains)
        if not domains:
            raise ConfigError("DomainTracker needs at least one domain")
        if len(set(domains)) != len(domains):
            raise ConfigError(f"DomainTracker domains must be unique; got {domains}")
        self.domains = domains
        self.window = check_int("window", window, low=1)
        self._index = {d: i for i, d in enumerate(domains)}
        k = len(domains)
        self.history = {name: torch.zeros(k, self.window, dtype=torch.float64) for name in _WINDOW_STATS}
        self.filled = torch.zeros(k, dtype=torch.long)  # observations in the window, <= window
        self.cursor = torch.zeros(k, dtype=torch.long)  # next slot of each ring buffer
        self.total_count = torch.zeros(k, dtype=torch.float64)  # samples seen since the start
        self.updates = 0

    # ------------------------------------------------------------ feeding

    def batch_sums(self, batch: RolloutBatch) -> torch.Tensor:
        """Per-domain sums of one batch: ``(K, 6)`` float64 in the order of ``_STEP_SUMS``."""
        if batch.domains is None:
            raise BatchError("DomainTracker.update needs RolloutBatch.domains (one label per response)")
        labels, codes = batch.domain_codes()
        unknown = [label for label in labels if label not in self._index]
        if unknown:
            raise BatchError(f"batch has domain(s) {unknown} that the tracker does not know; known domains: {self.domains}")
        to_tracker = np.array([self._index[label] for label in labels], dtype=np.int64)
        k = len(self.domains)
        sums = torch.zeros(k, len(_STEP_SUMS), dtype=torch.float64)
        if batch.n == 0:
            return sums
        # Everything is reduced on the batch's device, with one scatter per level (rows, groups);
        # only the (K, 6) sums travel to the CPU.
        device = batch.device
        domain_index = torch.from_numpy(to_tracker[codes]).to(device)
        rewards = batch.rewards.detach().to(torch.float64)
        finite = torch.isfinite(rewards)
        clean = torch.where(finite, rewards, torch.zeros_like(rewards))
        finite_f = finite.to(torch.float64)
        if batch.advantages is not None:
            from .scorers import advantage_magnitude

            magnitude = advantage_magnitude(batch.advantages.detach(), batch.valid_mask).to(torch.float64) * finite_f
        else:
            magnitude = torch.zeros_like(clean)
        rows = torch.stack([finite_f, clean, magnitude, 1.0 - finite_f], dim=1)
        per_domain = torch.zeros(k, 4, dtype=torch.float64, device=device).index_add_(0, domain_index, rows)
        per_group_domain = torch.zeros(k, 2, dtype=torch.float64, device=device)
        if batch.group_ids is not None:
            group_index, groups = dense_groups(batch.group_ids.detach())
            moments = torch.stack([torch.ones_like(clean), clean, clean * clean], dim=1)
            moments = torch.zeros(groups, 3, dtype=torch.float64, device=device).index_add_(0, group_index, moments)
            mean = moments[:, 1] / moments[:, 0]
            variance = (moments[:, 2] / moments[:, 0] - mean * mean).clamp_min(0.0)  # float64: no cancellation issue
            # A group belongs to the domain of its members (they share one prompt).
            group_domain = torch.zeros(groups, dtype=torch.long, device=device).scatter_(0, group_index, domain_index)
            per_group_domain.index_add_(0, group_domain, torch.stack([variance, torch.ones_like(variance)], dim=1))
        return torch.cat([per_domain[:, :3], per_group_domain, per_domain[:, 3:]], dim=1).cpu()

    def update(self, batch: RolloutBatch, step: int | None = None, sync: bool = True) -> None:
        """Add one batch; with ``sync`` and torch.distributed initialised, sums are all-reduced first.

        Pass ``sync=False`` when ``batch`` is already the global batch, identical on every rank.
        """
        self.update_from_sums(self.batch_sums(batch), step=step, sync=sync)

    def update_from_sums(self, sums: torch.Tensor, step: int | None = None, sync: bool = True) -> None:
        """Add per-domain sums ``(K, 6)`` (see `batch_sums`), e.g. computed by a host from its own data."""
        sums = sums.to(torch.float64).clone()
        if sync:
            sums = _all_reduce_sum(sums)
        step_value = float(self.updates if step is None else step)
        count = sums[:, 0]
        seen = torch.nonzero((count > 0) | (sums[:, 4] > 0)).flatten()
        slots = self.cursor[seen]
        per_sample = count[seen].clamp_min(1.0)
        fresh = {
            "reward": sums[seen, 1] / per_sample,
            "abs_advantage": sums[seen, 2] / per_sample,
            "group_variance": sums[seen, 3] / sums[seen, 4].clamp_min(1.0),
            "count": count[seen],
            "step": torch.full_like(per_sample, step_value),
        }
        for name, values in fresh.items():
            self.history[name][seen, slots] = values
        self.cursor[seen] = (slots + 1) % self.window
        self.filled[seen] = (self.filled[seen] + 1).clamp_max(self.window)
        self.total_count += count
        self.updates += 1

    # ------------------------------------------------------------ statistics

    def _valid(self) -> torch.Tensor:
        return torch.arange(self.window).unsqueeze(0) < self.filled.unsqueeze(1)

    def _window_mean(self, name: str) -> torch.Tensor:
        valid = self._valid()
        values = (self.history[name] * valid).sum(dim=1)
        return torch.where(self.filled > 0, values / self.filled.clamp_min(1), torch.full_like(values, float("nan")))

    def mean_reward(self) -> torch.Tensor:
        """``(K,)`` windowed mean reward per domain (NaN for a domain never observed)."""
        return self._window_mean("reward")

    def mean_abs_advantage(self) -> torch.Tensor:
        """``(K,)`` windowed mean |advantage| per domain (NaN if never observed)."""
        return self._window_mean("abs_advantage")

    def mean_group_variance(self) -> torch.Tensor:
        """``(K,)`` windowed mean group reward variance per domain (NaN if never observed)."""
        return self._window_mean("group_variance")

    def window_counts(self) -> torch.Tensor:
        """``(K,)`` samples per domain inside the window."""
        return (self.history["count"] * self._valid()).sum(dim=1)

    def reward_slope(self) -> torch.Tensor:
        """``(K,)`` least-squares slope of windowed mean reward against step (0 with < 2 points)."""
        valid = self._valid().to(torch.float64)
        n = valid.sum(dim=1)
        x, y = self.history["step"], self.history["reward"]
        x_mean = (x * valid).sum(dim=1) / n.clamp_min(1)
        y_mean = (y * valid).sum(dim=1) / n.clamp_min(1)
        dx = (x - x_mean.unsqueeze(1)) * valid
        dy = (y - y_mean.unsqueeze(1)) * valid
        var_x = (dx * dx).sum(dim=1)
        slope = (dx * dy).sum(dim=1) / var_x.clamp_min(1e-12)
        return torch.where((n >= 2) & (var_x > 0), slope, torch.zeros_like(slope))

    def as_dict(self) -> dict[str, dict[str, float]]:
        """Every statistic per domain, as plain floats (for logs)."""
        stats = {
            "reward": self.mean_reward(), "abs_advantage": self.mean_abs_advantage(),
            "group_variance": self.mean_group_variance(), "slope": self.reward_slope(),
            "samples": self.total_count,
        }
        return {name: {d: float(v[i]) for i, d in enumerate(self.domains)} for name, v in stats.items()}

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {
            "domains": list(self.domains), "window": self.window, "updates": self.updates,
            "history": {k: v.clone() for k, v in self.history.items()},
            "filled": self.filled.clone(), "cursor": self.cursor.clone(), "total_count": self.total_count.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        if list(state["domains"]) != self.domains or int(state["window"]) != self.window:
            raise ConfigError(
                f"DomainTracker state was saved for domains={state['domains']} window={state['window']}, "
                f"but this tracker has domains={self.domains} window={self.window}; resume with the same config"
            )
        self.history = {k: v.clone().to(torch.float64) for k, v in state["history"].items()}
        self.filled = state["filled"].clone()
        self.cursor = state["cursor"].clone()
        self.total_count = state["total_count"].clone()
        self.updates = int(state["updates"])


def _all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    buffer = values.to(device)
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
    return buffer.to("cpu", torch.float64)


__all__ = ["DomainTracker"]
