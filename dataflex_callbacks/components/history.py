"""`PromptHistory`: compact per-prompt record of recent group outcomes.

One slot per prompt key, stored in flat numpy arrays (about 20 bytes a prompt, so hundreds of
thousands of prompts cost a few MB): the current streak of no-signal groups, how often the
prompt was seen, its last solve rate and the step it was last seen. Keys (dataset row indices
for the sampler, or any hashable) map to slots through one dictionary.

DDP: `update` reduces nothing itself; feed it the *global* batch (identical on every rank), or
call it with ``sync=True`` to all-gather the per-group outcomes first.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from numpy.typing import ArrayLike, DTypeLike

from dataflex_callbacks._distributed import all_gather_objects, world_size_and_rank
from dataflex_callbacks.config.params import check_number
from dataflex_callbacks.errors import BatchError, StateError
from dataflex_callbacks.rollout.batch import NO_DOMAIN, RolloutBatch
from dataflex_callbacks.rollout.groups import dense_groups, segment_mean, segment_variance
from dataflex_callbacks.rollout.prompt_keys import hashable_key

ZERO_VARIANCE_EPS = 1e-12


class PromptHistory:
    """Per-prompt outcome history: zero-variance streaks, solve rates, last step seen.

    Args:
        capacity: prompt slots allocated up front; the arrays double when they fill.
        prior_rate: moving-average rate, in (0, 1], of each domain's no-signal share (the weight of
            the newest batch).
    """

    def __init__(self, capacity: int = 1024, prior_rate: float = 0.2) -> None:
        self.prior_rate = check_number("prior_rate", prior_rate, low=0.0, high=1.0, low_open=True)
        self.domain_prior: dict[str, float] = {}  # domain -> moving average of its no-signal share
        self.domain_noise: dict[str, float] = {}  # domain -> moving average of its reward-noise estimate 2 * rho
        self._slots: dict[Hashable, int] = {}
        self.size = 0
        self._allocate(max(int(capacity), 1))

    def _allocate(self, capacity: int) -> None:
        def grow(old: np.ndarray | None, dtype: DTypeLike, fill: float) -> np.ndarray:
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
        """Slots of ``keys`` (``-1`` for a key never seen); keys of any form `hashable_key` accepts."""
        return np.fromiter((self._slots.get(hashable_key(k), -1) for k in keys), dtype=np.int64, count=len(keys))

    def streaks(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Current no-signal streak of each key (0 for unseen keys)."""
        return self.streaks_at(self.lookup(keys))

    def streaks_at(self, slots: np.ndarray) -> np.ndarray:
        """`streaks` for slots already looked up (``-1``, an unseen key, gives 0)."""
        out = np.zeros(len(slots), dtype=np.int32)
        known = slots >= 0
        out[known] = self.streak[slots[known]]
        return out

    @staticmethod
    def group_outcomes(batch: RolloutBatch, threshold: float = 0.5, count_pairs: bool = True) -> GroupOutcomes:
        """Per group: its prompt key, domain (`NO_DOMAIN` without ``domains``), solve rate, reward variance, and
        its identical-answer pairs (`identical_pairs`; zero when ``count_pairs`` is False or without
        ``completion_ids``)."""
        if batch.group_ids is None or batch.prompt_keys is None:
            missing = "group_ids" if batch.group_ids is None else "prompt_keys"
            raise BatchError(
                f"PromptHistory needs RolloutBatch.{missing} (pre-rollout selection tracks prompts by group)"
            )
        rewards = torch.nan_to_num(batch.rewards.detach().to("cpu", torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
        index, groups = dense_groups(batch.group_ids.detach().cpu())
        first_row = torch.full((groups,), batch.n, dtype=torch.long).scatter_reduce_(
            0, index, torch.arange(batch.n), reduce="amin"
        )
        rows = first_row.tolist()
        keys = [batch.prompt_keys[i] for i in rows]
        labels = [NO_DOMAIN] * groups if batch.domains is None else [batch.domains[i] for i in rows]
        solve = segment_mean((rewards > threshold).double(), index, groups)
        variance = segment_variance(rewards, index, groups)
        if count_pairs:
            pairs, disagreeing = identical_pairs(batch, rewards.numpy(), index.numpy(), groups)
        else:
            pairs = disagreeing = np.zeros(groups)
        return GroupOutcomes(keys, labels, solve.numpy(), variance.numpy(), pairs, disagreeing)

    def gathered_outcomes(self, batch: RolloutBatch, sync: bool = False, noise_check: bool = True) -> GroupOutcomes:
        """`group_outcomes` of the batch; with ``sync=True``, every rank's groups (all-gathered, rank order)."""
        outcomes = self.group_outcomes(batch, count_pairs=noise_check)
        return _all_gather_outcomes(outcomes) if sync else outcomes

    def update(self, batch: RolloutBatch, step: int, sync: bool = False, noise_check: bool = True) -> dict[str, float]:
        """Record each group's outcome; returns the batch's group count and no-signal shares.

        ``noise_check=False`` ignores ``completion_ids``: only zero-variance groups count as no-signal.
        """
        return self.record_outcomes(self.gathered_outcomes(batch, sync=sync, noise_check=noise_check), step)

    def record_outcomes(self, outcomes: GroupOutcomes, step: int) -> dict[str, float]:
        """`record` the groups of ``outcomes`` (`group_outcomes` or `gathered_outcomes`) seen at ``step``."""
        return self.record(
            outcomes.keys,
            outcomes.solve_rate,
            outcomes.variance,
            step,
            labels=outcomes.labels,
            pairs=outcomes.pairs,
            disagreeing=outcomes.disagreeing,
        )

    def record(
        self,
        keys: Sequence[Hashable],
        solve_rate: np.ndarray,
        variance: np.ndarray,
        step: int,
        labels: Sequence[str] | None = None,
        pairs: np.ndarray | None = None,
        disagreeing: np.ndarray | None = None,
    ) -> dict[str, float]:
        """Record outcomes given directly (one entry per group).

        A group gives no learning signal when its rewards all agree (zero variance) or when two
        identical completions got different rewards (``disagreeing > 0``: the reward is noise, it
        does not depend on the answer alone). The streak counts such groups in a row.

        With ``labels`` (each group's domain), each domain's predicted no-signal share for prompts
        not seen yet is tracked as an exponential moving average (`domain_prior`) of
        ``z + (1 - z) * min(1, 2 * rho)``: ``z`` the domain's share of zero-variance groups and
        ``rho`` the share of its identical-completion pairs scored differently. If a share ``eta``
        of rewards were fair coin flips, ``rho = eta / 2``; so ``2 * rho`` estimates the share of
        the domain's rewards that are noise, which per-group flags (needing a duplicate answer in
        the group) undercount.
        """
        n = len(keys)
        zero, noisy = no_signal_flags(variance, disagreeing)
        no_signal = zero | noisy
        pairs = np.zeros(n) if pairs is None else np.asarray(pairs, dtype=np.float64)
        disagreeing = np.zeros(n) if disagreeing is None else np.asarray(disagreeing, dtype=np.float64)
        for key, rate, empty in zip(keys, np.asarray(solve_rate), no_signal, strict=True):
            slot = self._slot(hashable_key(key))
            self.streak[slot] = self.streak[slot] + 1 if empty else 0
            self.seen[slot] += 1
            self.solve_rate[slot] = rate
            self.last_step[slot] = step
        if labels is not None and n:
            self._update_prior(labels, zero, pairs, disagreeing)
        return {
            "groups": float(n),
            "zero_variance_share": float(zero.mean()) if n else 0.0,
            "noisy_share": float(noisy.mean()) if n else 0.0,
            "no_signal_share": float(no_signal.mean()) if n else 0.0,
        }

    def _update_prior(
        self, labels: Sequence[str], zero: np.ndarray, pairs: np.ndarray, disagreeing: np.ndarray
    ) -> None:
        names, codes = np.unique(np.asarray([str(label) for label in labels]), return_inverse=True)
        groups = np.bincount(codes, minlength=len(names))
        zero_share = np.bincount(codes, weights=zero.astype(np.float64), minlength=len(names)) / groups
        pair_total = np.bincount(codes, weights=pairs, minlength=len(names))
        pair_disagree = np.bincount(codes, weights=disagreeing, minlength=len(names))
        for k, name in enumerate(names.tolist()):
            if pair_total[k] > 0:
                noise = min(1.0, 2.0 * pair_disagree[k] / pair_total[k])
                old_noise = self.domain_noise.get(name)
                self.domain_noise[name] = (
                    noise if old_noise is None else ((1 - self.prior_rate) * old_noise + self.prior_rate * noise)
                )
            noise = self.domain_noise.get(name, 0.0)
            share = zero_share[k] + (1.0 - zero_share[k]) * noise
            old = self.domain_prior.get(name)
            self.domain_prior[name] = share if old is None else (1 - self.prior_rate) * old + self.prior_rate * share

    def prior(self, labels: Sequence[str]) -> np.ndarray:
        """Predicted no-signal probability of an unseen prompt of each domain (NaN for a domain not seen yet)."""
        return np.fromiter(
            (self.domain_prior.get(str(label), np.nan) for label in labels), dtype=np.float64, count=len(labels)
        )

    def state_dict(self) -> dict:
        """Keys (str / int), per-prompt arrays as CPU tensors, domain estimates as floats.

        Only tensors and Python scalars, so a host's checkpoint holding it loads with
        ``torch.load(..., weights_only=True)`` (Lightning's and recent HF Trainer's default).
        """
        n = self.size
        return {
            "keys": [hashable_key(k) for k in self.keys],
            "streak": torch.from_numpy(self.streak[:n].copy()),
            "seen": torch.from_numpy(self.seen[:n].copy()),
            "solve_rate": torch.from_numpy(self.solve_rate[:n].copy()),
            "last_step": torch.from_numpy(self.last_step[:n].copy()),
            "domain_prior": {str(k): float(v) for k, v in self.domain_prior.items()},
            "domain_noise": {str(k): float(v) for k, v in self.domain_noise.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a `state_dict` (its arrays are tensors, on any device)."""
        keys = [hashable_key(k) for k in state["keys"]]
        self.domain_prior = {str(k): float(v) for k, v in state.get("domain_prior", {}).items()}
        self.domain_noise = {str(k): float(v) for k, v in state.get("domain_noise", {}).items()}
        self._slots = {k: i for i, k in enumerate(keys)}
        self.keys = keys
        self.size = len(keys)
        capacity = max(self.size, 1)
        self.streak = _numpy(state, "streak", np.int32)
        self.seen = _numpy(state, "seen", np.int32)
        self.solve_rate = _numpy(state, "solve_rate", np.float32)
        self.last_step = _numpy(state, "last_step", np.int64)
        if self.streak.shape[0] < capacity:
            self._allocate(capacity)


def no_signal_flags(variance: ArrayLike, disagreeing: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per group: ``(zero, noisy)``. Zero: its rewards all agree. Noisy: they do not, but two
    identical completions got different rewards (``disagreeing > 0``). Either gives no signal."""
    zero = np.asarray(variance, dtype=np.float64) <= ZERO_VARIANCE_EPS
    if disagreeing is None:
        return zero, np.zeros_like(zero)
    return zero, (np.asarray(disagreeing, dtype=np.float64) > 0) & ~zero


def _numpy(state: dict, name: str, dtype: DTypeLike) -> np.ndarray:
    """A writable numpy copy of the saved tensor ``state[name]`` (on any device), or a `StateError`."""
    value = state[name]
    if not isinstance(value, torch.Tensor):
        raise StateError(
            f"PromptHistory state: {name!r} must be the tensor PromptHistory.state_dict() saves; "
            f"got {type(value).__name__}"
        )
    return value.detach().cpu().numpy().astype(dtype)


_HASH_SEED = 20_506_021_770  # fixed: the same answer hashes alike in every process and run


def completion_hashes(completion_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``(N,)`` int64 hash of each completion's valid tokens and their positions, on the ids' device.

    ``sum_t x_t * w_t`` with ``x_t`` the token id at a valid position and -1 elsewhere, random
    64-bit weights ``w`` and int64 wrap-around: two different answers collide with probability
    about 2^-64, so the rows need not be compared (or moved off the GPU) token by token. On the CPU
    an integer matrix-vector product computes it (about 10x faster than multiply-then-sum there);
    CUDA has no int64 matmul, so it multiplies and sums.
    """
    generator = torch.Generator().manual_seed(_HASH_SEED)
    weights = torch.randint(-(2**63), 2**63 - 1, (completion_ids.shape[1],), generator=generator, dtype=torch.int64)
    tokens = completion_ids.long()
    if mask is not None:
        tokens = torch.where(mask.to(tokens.device), tokens, -1)
    weights = weights.to(tokens.device)
    if tokens.device.type == "cpu":
        return tokens @ weights
    return (tokens * weights).sum(dim=1)


def identical_pairs(
    batch: RolloutBatch, rewards: np.ndarray, index: np.ndarray, groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per group: pairs of identical completions, and how many of them got different rewards.

    A verifiable reward is a function of the completion; a pair of identical answers scored
    differently shows reward noise. Both counts are zero without ``completion_ids``. Vectorised:
    answers are numbered by their `completion_hashes`; pairs are counted from the sizes of the
    (group, answer) and (group, answer, reward) classes.
    """
    if batch.completion_ids is None or batch.n == 0:
        return np.zeros(groups), np.zeros(groups)
    hashes = completion_hashes(batch.completion_ids.detach(), batch.valid_mask).cpu().numpy()
    _, answer = np.unique(hashes, return_inverse=True)
    _, score = np.unique(rewards, return_inverse=True)
    answers, scores = int(answer.max()) + 1, int(score.max()) + 1
    same_answer = index.astype(np.int64) * answers + answer.reshape(-1)
    same_score = same_answer * scores + score.reshape(-1)
    counts = []
    for key, classes_per_group in ((same_answer, answers), (same_score, answers * scores)):
        classes, size = np.unique(key, return_counts=True)
        counts.append(np.bincount(classes // classes_per_group, weights=size * (size - 1) / 2.0, minlength=groups))
    pairs, same_score_pairs = counts
    return pairs, pairs - same_score_pairs


class GroupOutcomes(NamedTuple):
    """What `PromptHistory.group_outcomes` reads off one batch, one entry per group."""

    keys: list
    labels: list | None
    solve_rate: np.ndarray
    variance: np.ndarray
    pairs: np.ndarray  # pairs of identical completions in the group
    disagreeing: np.ndarray  # of those, pairs scored differently


def _all_gather_outcomes(outcomes: GroupOutcomes) -> GroupOutcomes:
    """Every rank's group outcomes, in rank order (``outcomes`` itself with one rank)."""
    if world_size_and_rank()[0] == 1:
        return outcomes
    gathered = all_gather_objects(
        (
            list(outcomes.keys),
            outcomes.labels,
            outcomes.solve_rate.tolist(),
            outcomes.variance.tolist(),
            outcomes.pairs.tolist(),
            outcomes.disagreeing.tolist(),
        )
    )
    labels = None if any(part[1] is None for part in gathered) else [v for part in gathered for v in part[1]]
    return GroupOutcomes(
        [k for part in gathered for k in part[0]],
        labels,
        np.array([v for part in gathered for v in part[2]], dtype=np.float64),
        np.array([v for part in gathered for v in part[3]], dtype=np.float64),
        np.array([v for part in gathered for v in part[4]], dtype=np.float64),
        np.array([v for part in gathered for v in part[5]], dtype=np.float64),
    )
