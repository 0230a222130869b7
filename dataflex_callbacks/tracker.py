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
        # The statistics need only a few (N,) vectors; reducing them with numpy on the CPU costs a
        # fraction of the per-call overhead of small torch kernels (and one host copy on a GPU).
        identity = to_tracker.shape[0] == k and bool(np.all(to_tracker == np.arange(k)))
        domain_index = codes if identity else to_tracker[codes]
        rewards = batch.rewards.detach().to("cpu", torch.float64).numpy()
        rows_per_domain = np.bincount(domain_index, minlength=k).astype(np.float64)
        finite = np.isfinite(rewards)
        if finite.all():  # the common case: no masking arrays to build
            finite_f, clean, finite_count = None, rewards, rows_per_domain
        else:
            finite_f = finite.astype(np.float64)
            clean = np.where(finite, rewards, 0.0)
            finite_count = np.bincount(domain_index, weights=finite_f, minlength=k)
        sums = np.zeros((k, len(_STEP_SUMS)))
        sums[:, 0] = finite_count
        sums[:, 1] = np.bincount(domain_index, weights=clean, minlength=k)
        if batch.advantages is not None:
            from .scorers import advantage_magnitude

            magnitude = advantage_magnitude(batch.advantages.detach(), batch.valid_mask).to("cpu", torch.float64).numpy()
            if finite_f is not None:
                magnitude = magnitude * finite_f
            sums[:, 2] = np.bincount(domain_index, weights=magnitude, minlength=k)
        if batch.group_ids is not None:
            variance, group_domain = _group_variance(batch.group_ids.detach().cpu().numpy(), clean, domain_index)
            sums[:, 3] = np.bincount(group_domain, weights=variance, minlength=k)
            sums[:, 4] = np.bincount(group_domain, minlength=k)
        sums[:, 5] = rows_per_domain - finite_count
        return torch.from_numpy(sums)

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
        values = sums.numpy()
        count = values[:, 0]
        seen = np.flatnonzero((count > 0) | (values[:, 4] > 0))
        cursor, filled = self.cursor.numpy(), self.filled.numpy()  # views: writes land in the tensors
        slots = cursor[seen]
        per_sample = np.maximum(count[seen], 1.0)
        fresh = {
            "reward": values[seen, 1] / per_sample,
            "abs_advantage": values[seen, 2] / per_sample,
            "group_variance": values[seen, 3] / np.maximum(values[seen, 4], 1.0),
            "count": count[seen],
            "step": np.full(seen.shape[0], step_value),
        }
        for name, column in fresh.items():
            self.history[name].numpy()[seen, slots] = column
        cursor[seen] = (slots + 1) % self.window
        filled[seen] = np.minimum(filled[seen] + 1, self.window)
        self.total_count += sums[:, 0]
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


def _group_variance(group_ids: np.ndarray, rewards: np.ndarray, domain_index: np.ndarray):
    """Population reward variance per group ``(G,)`` and each group's domain ``(G,)``.

    A group belongs to the domain of its members (they share one prompt). Contiguous equal-size
    groups (the GRPO layout) reduce over a ``(G, s)`` view; any other layout goes through ids.
    """
    n = group_ids.shape[0]
    changes = np.flatnonzero(group_ids[1:] != group_ids[:-1])
    size = int(changes[0]) + 1 if changes.size else n
    if n % size == 0 and changes.size == n // size - 1 and np.all(np.diff(changes) == size) \
            and np.all(group_ids[changes + 1] > group_ids[changes]):
        blocks = rewards.reshape(-1, size)
        centred = blocks - blocks.mean(axis=1, keepdims=True)
        return (centred * centred).mean(axis=1), domain_index.reshape(-1, size)[:, 0]
    _, group_index = np.unique(group_ids, return_inverse=True)
    sizes = np.bincount(group_index)
    mean = np.bincount(group_index, weights=rewards) / sizes
    centred = rewards - mean[group_index]
    variance = np.bincount(group_index, weights=centred * centred) / sizes
    group_domain = np.zeros(sizes.shape[0], dtype=np.int64)
    group_domain[group_index] = domain_index
    return variance, group_domain


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
