"""`PromptHistory`: compact per-prompt record of recent group outcomes.

One slot per prompt key, stored in flat numpy arrays (about 20 bytes a prompt, so hundreds of
thousands of prompts cost a few MB): the current streak of zero-variance groups, how often the
prompt was seen, its last solve rate and the step it was last seen. Keys (dataset row indices
for the sampler, or any hashable) map to slots through one dictionary.

DDP: `update` reduces nothing itself; feed it the *global* batch (identical on every rank), or
call it with ``sync=True`` to all-gather the per-group outcomes first.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
import torch

from .batch import RolloutBatch
from .errors import BatchError
from .groups import dense_groups, segment_mean, segment_variance

ZERO_VARIANCE_EPS = 1e-12
KEY_COLUMNS = ("prompt_key", "prompt")  # where a row's prompt key is read from, in order


def hashable_key(value) -> Hashable:
    """A prompt key usable in a dict: strings and ints as they are, anything else as canonical JSON."""
    if isinstance(value, (str, int)):
        return value
    import json

    return json.dumps(value, sort_keys=True, default=str)


def row_prompt_key(row, index: int) -> Hashable:
    """The stable key of one dataset row: its ``prompt_key``, else its ``prompt``, else its index.

    Samplers and host adapters both use this rule, so the history they share agrees on keys.
    """
    for column in KEY_COLUMNS:
        if hasattr(row, "keys") and column in row:
            return hashable_key(row[column])
    return index


class PromptHistory:
    """Per-prompt outcome history: zero-variance streaks, solve rates, last step seen."""

    def __init__(self, capacity: int = 1024):
        self._slots: dict[Hashable, int] = {}
        self.size = 0
        self._allocate(max(int(capacity), 1))

    def _allocate(self, capacity: int) -> None:
        def grow(old, dtype, fill):
            new = np.full(capacity, fill, dtype=dtype)
            if old is not None:
                new[: old.shape[0]] = old
            return new

        self.streak = grow(getattr(self, "streak", None), np.int32, 0)
        self.seen = grow(getattr(self, "seen", None), np.int32, 0)
        self.solve_rate = grow(getattr(self, "solve_rate", None), np.float32, np.nan)
        self.last_step = grow(getattr(self, "last_step", None), np.int64, -1)
        self.keys: list = getattr(self, "keys", [])

    def _slot(self, key: Hashable) -> int:
        slot = self._slots.get(key)
        if slot is None:
            slot = self.size
            if slot >= self.streak.shape[0]:
                self._allocate(2 * self.streak.shape[0])
            self._slots[key] = slot
            self.keys.append(key)
            self.size += 1
        return slot

    def lookup(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Slots of ``keys`` (``-1`` for a key never seen)."""
        return np.fromiter((self._slots.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))

    def streaks(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Current zero-variance streak of each key (0 for unseen keys)."""
        slots = self.lookup(keys)
        out = np.zeros(len(slots), dtype=np.int32)
        known = slots >= 0
        out[known] = self.streak[slots[known]]
        return out

    @staticmethod
    def group_outcomes(batch: RolloutBatch, threshold: float = 0.5) -> tuple[list, torch.Tensor, torch.Tensor]:
        """Per group: its prompt key, solve rate and reward variance."""
        if batch.group_ids is None or batch.prompt_keys is None:
            missing = "group_ids" if batch.group_ids is None else "prompt_keys"
            raise BatchError(f"PromptHistory needs RolloutBatch.{missing} (pre-rollout selection tracks prompts by group)")
        rewards = torch.nan_to_num(batch.rewards.detach().to("cpu", torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
        index, groups = dense_groups(batch.group_ids.detach().cpu())
        first_row = torch.full((groups,), batch.n, dtype=torch.long).scatter_reduce_(
            0, index, torch.arange(batch.n), reduce="amin")
        keys = [batch.prompt_keys[i] for i in first_row.tolist()]
        solve = segment_mean((rewards > threshold).double(), index, groups)
        variance = segment_variance(rewards, index, groups)
        return keys, solve, variance

    def update(self, batch: RolloutBatch, step: int, sync: bool = False) -> dict[str, float]:
        """Record each group's outcome; returns ``zero_variance_share`` and ``groups`` for this batch."""
        keys, solve, variance = self.group_outcomes(batch)
        if sync:
            keys, solve, variance = _all_gather_outcomes(keys, solve, variance)
        return self.record(keys, solve.numpy(), variance.numpy(), step)

    def record(self, keys: Sequence[Hashable], solve_rate: np.ndarray, variance: np.ndarray, step: int) -> dict[str, float]:
        """Record outcomes given directly (one entry per group)."""
        zero = np.asarray(variance) <= ZERO_VARIANCE_EPS
        for key, rate, is_zero in zip(keys, np.asarray(solve_rate), zero):
            slot = self._slot(key)
            self.streak[slot] = self.streak[slot] + 1 if is_zero else 0
            self.seen[slot] += 1
            self.solve_rate[slot] = rate
            self.last_step[slot] = step
        n = len(keys)
        return {"groups": float(n), "zero_variance_share": float(zero.mean()) if n else 0.0}

    def state_dict(self) -> dict:
        n = self.size
        return {"keys": list(self.keys), "streak": self.streak[:n].copy(), "seen": self.seen[:n].copy(),
                "solve_rate": self.solve_rate[:n].copy(), "last_step": self.last_step[:n].copy()}

    def load_state_dict(self, state: dict) -> None:
        keys = list(state["keys"])
        self._slots = {k: i for i, k in enumerate(keys)}
        self.keys = keys
        self.size = len(keys)
        capacity = max(self.size, 1)
        self.streak = np.asarray(state["streak"], dtype=np.int32).copy()
        self.seen = np.asarray(state["seen"], dtype=np.int32).copy()
        self.solve_rate = np.asarray(state["solve_rate"], dtype=np.float32).copy()
        self.last_step = np.asarray(state["last_step"], dtype=np.int64).copy()
        if self.streak.shape[0] < capacity:
            self._allocate(capacity)


def _all_gather_outcomes(keys, solve, variance):
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return keys, solve, variance
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (list(keys), solve.tolist(), variance.tolist()))
    all_keys = [k for part in gathered for k in part[0]]
    all_solve = torch.tensor([v for part in gathered for v in part[1]], dtype=torch.float64)
    all_var = torch.tensor([v for part in gathered for v in part[2]], dtype=torch.float64)
    return all_keys, all_solve, all_var
