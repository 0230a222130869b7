"""What a rollout allocator keeps across steps: the run's pilot outcomes (`PassHistory`), correct responses
(`ResponseBank`) and evicted prompts (`EvictedPrompts`), and the checks that read them back from a checkpoint,
each `StateError` naming the field.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dataflex_callbacks._plain_values import plain_scalar
from dataflex_callbacks.errors import PilotEvidenceWarning, StateError, check_state
from dataflex_callbacks.rollout.prompt_keys import hashable_key


def shown(value: Any) -> str:
    """A saved value as a message shows it: a number as written, else its type and length or shape."""
    if isinstance(value, (bool, int, float, str, type(None))):
        return repr(value)
    size = f" of shape {tuple(value.shape)}" if hasattr(value, "shape") else ""
    return f"a {type(value).__name__}{size or (f' of length {len(value)}' if hasattr(value, '__len__') else '')}"


def saved_field(state: Mapping, name: str, kind: type, what: str) -> Any:
    """``state[name]`` when it is a ``kind`` (a tuple counts as a list), else a `StateError` naming the field."""
    value = state[name]
    if isinstance(value, tuple) and kind is list:
        return list(value)
    if not isinstance(value, Mapping if kind is dict else kind):
        raise StateError(
            f"{what} state: '{name}' must be a {kind.__name__}, as {what}.state_dict() saves it; got {shown(value)}. "
            "The checkpoint is damaged: resume from another one"
        )
    return value


def saved_numbers(values: Any, count: int, name: str, what: str) -> list[float]:
    """``count`` finite numbers saved as ``name``, as floats; else a `StateError` naming the field."""
    items = list(values) if isinstance(values, (list, tuple, torch.Tensor)) else None
    numbers = [] if items is None else [plain_scalar(v) for v in items]
    if (
        items is None
        or len(numbers) != count
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers)
    ):
        raise StateError(
            f"{what} state: '{name}' must be {count} finite numbers; got {shown(values)}. The checkpoint is "
            "damaged: resume from another one"
        )
    return [float(v) for v in numbers]


def restore_generator(generator: torch.Generator, state: Mapping, what: str) -> None:
    """Set ``generator`` to the saved ``state["generator"]`` (``torch.Generator.get_state()``, a 1-D uint8 tensor); a
    `StateError` naming ``what`` for anything else."""
    saved = state["generator"]
    if not isinstance(saved, torch.Tensor) or saved.dtype != torch.uint8 or saved.dim() != 1:
        raise StateError(
            f"{what} state: 'generator' must be a uint8 tensor (torch.Generator.get_state()); got {shown(saved)}. The "
            "checkpoint is damaged: resume from another one"
        )
    generator.set_state(saved.clone())


class PassHistory:
    """The run's pilot outcomes: per prompt (its earlier pilots) and per domain (a Beta fitted to its prompts).

    The posterior rule's prior for a prompt is its domain's Beta over prompt pass rates, fitted by
    the method of moments: the mean pass rate ``m`` from every pilot completion, the second moment
    ``E[p^2]`` from pairs of completions of one pilot (two completions of one prompt both pass with
    probability ``p^2``), so ``a + b = m (1 - m) / (E[p^2] - m^2) - 1``. A fixed ``strength`` replaces
    ``a + b``. Plus the prompt's own earlier pilots, times ``weight``. Pilots only: a commit follows
    from its pilot's outcome, so committed completions would bias the fit. Updated from the gathered
    tallies, so it is the same on every rank.
    """

    MIN_STRENGTH, MAX_STRENGTH = 0.05, 100.0
    """Bounds of a fitted ``a + b``: a domain whose prompts all pass alike would give an infinite one."""

    def __init__(self) -> None:
        self._slots: dict[Hashable, int] = {}
        self.counts = np.zeros((0, 2), dtype=np.float64)  # (prompts, [passes, fails])
        self.domains: dict[str, list[float]] = {}  # domain -> [passes, trials, passing pairs, pairs]

    def prior(
        self, keys: Sequence[Any], domains: Sequence[str], strength: float | None, weight: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(P,)`` prior passes and fails for ``keys``: the domain's Beta (``a``, ``b``; ``strength``: None fits
        ``a + b``), plus ``weight`` times the prompt's own earlier pilot counts."""
        slots = np.fromiter((self._slots.get(hashable_key(k), -1) for k in keys), dtype=np.int64, count=len(keys))
        own = np.zeros((len(keys), 2))
        known = slots >= 0
        own[known] = self.counts[slots[known]]
        passes, trials, pair_passes, pairs = self._pooled(domains).T
        mean = np.where(trials > 0, passes / np.maximum(trials, 1.0), 0.5)
        if strength is None:
            second = np.where(pairs > 0, pair_passes / np.maximum(pairs, 1.0), mean)
            spread = second - mean * mean
            fitted = mean * (1.0 - mean) / np.maximum(spread, 1e-9) - 1.0
            total = np.where(pairs > 0, np.clip(fitted, self.MIN_STRENGTH, self.MAX_STRENGTH), 2.0)
        else:
            total = np.full(len(keys), float(strength))
        base = np.stack([mean * total, (1.0 - mean) * total], axis=1)
        prior = torch.from_numpy(base + weight * own)
        return prior[:, 0], prior[:, 1]

    def has_pilots(self, domains: Sequence[str]) -> torch.Tensor:
        """``(P,)`` bool: each domain has a pilot completion recorded (a domain without one has no estimate yet)."""
        return torch.from_numpy(self._pooled(domains)[:, 1] > 0)

    def _pooled(self, domains: Sequence[str]) -> np.ndarray:
        """``(P, 4)``: each domain's pooled [passes, trials, passing pairs, pairs] (zeros for a domain never seen)."""
        return np.array([self.domains.get(str(d), [0.0] * 4) for d in domains], dtype=np.float64).reshape(-1, 4)

    def record(self, keys: Sequence[Any], domains: Sequence[str], passes: torch.Tensor, trials: torch.Tensor) -> None:
        """Add each prompt's pilot (``(P,)`` passes of ``trials``) to its own and its domain's counts."""
        passes_np = passes.detach().cpu().double().numpy()
        trials_np = trials.detach().cpu().double().numpy()
        slots = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            slots[i] = self._slots.setdefault(hashable_key(key), len(self._slots))
        if len(self._slots) > self.counts.shape[0]:
            grown = np.zeros((max(len(self._slots), 2 * self.counts.shape[0]), 2))
            grown[: self.counts.shape[0]] = self.counts
            self.counts = grown
        np.add.at(self.counts[:, 0], slots, passes_np)  # column views: the adds land in self.counts
        np.add.at(self.counts[:, 1], slots, trials_np - passes_np)
        columns = np.stack([passes_np, trials_np, passes_np * (passes_np - 1.0), trials_np * (trials_np - 1.0)], axis=1)
        labels, codes = np.unique(np.asarray([str(d) for d in domains], dtype=object), return_inverse=True)
        sums = np.zeros((len(labels), 4))
        np.add.at(sums, codes, columns)
        for label, row in zip(labels.tolist(), sums.tolist(), strict=True):
            pooled = self.domains.setdefault(label, [0.0] * 4)
            for column, value in enumerate(row):
                pooled[column] += value

    def state_dict(self) -> dict:
        return {
            "keys": list(self._slots),
            "counts": torch.from_numpy(self.counts[: len(self._slots)].copy()),
            "domains": {label: list(values) for label, values in self.domains.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        check_state(state, ("keys", "counts", "domains"), "PassHistory")
        keys, counts = list(saved_field(state, "keys", list, "PassHistory")), state["counts"]
        if not isinstance(counts, torch.Tensor) or tuple(counts.shape) != (len(keys), 2):
            raise StateError(
                f"PassHistory state: 'counts' must be a tensor of shape ({len(keys)}, 2), one row per prompt key; got "
                f"{shown(counts)}. The checkpoint is damaged: resume from another one"
            )
        domains = saved_field(state, "domains", dict, "PassHistory")
        self.domains = {
            str(label): saved_numbers(values, 4, f"domains[{label!r}]", "PassHistory")
            for label, values in domains.items()
        }
        self._slots = {key: slot for slot, key in enumerate(keys)}
        self.counts = counts.detach().to("cpu", torch.float64).numpy().copy()


Response = torch.Tensor | dict[str, torch.Tensor]
"""A stored response: a tensor, or a dict of tensors (a host's row payload)."""


class ResponseBank:
    """The latest correct response of each prompt, for AR3PO's reuse in an all-wrong group.

    A response is whatever the host stores for a row, with its reward: a tensor (completion token ids ``(L,)``) or
    a dict of tensors (the TRL adapter stores a row's slice of every per-row tensor of TRL's batch). It is kept on
    the CPU, as plain tensors and dicts, so a checkpoint of it loads with ``torch.load(weights_only=True)``.
    """

    def __init__(self) -> None:
        self.responses: dict[Hashable, tuple[Response, float]] = {}

    def store(self, keys: Sequence[Any], responses: Sequence[Response], rewards: Sequence[float]) -> None:
        """Keep ``responses[i]`` (a tensor, or a dict of tensors) with ``rewards[i]`` as prompt ``keys[i]``'s latest
        correct response, copied to the CPU."""
        for key, response, reward in zip(keys, responses, rewards, strict=True):
            self.responses[hashable_key(key)] = (_on_cpu(response), float(reward))

    def holds(self, keys: Sequence[Any]) -> torch.Tensor:
        """``(P,)`` bool: a stored response exists for each key."""
        return torch.tensor([hashable_key(k) in self.responses for k in keys], dtype=torch.bool)

    def get(self, key: Any) -> tuple[Response, float]:
        """The stored ``(response, reward)`` of prompt ``key``."""
        return self.responses[hashable_key(key)]

    def state_dict(self) -> dict:
        keys = list(self.responses)
        return {
            "keys": keys,
            "responses": [self.responses[k][0] for k in keys],
            "rewards": [self.responses[k][1] for k in keys],
        }

    def load_state_dict(self, state: dict) -> None:
        check_state(state, ("keys", "responses", "rewards"), "ResponseBank")
        keys, responses = (
            saved_field(state, "keys", list, "ResponseBank"),
            saved_field(state, "responses", list, "ResponseBank"),
        )
        rewards = saved_numbers(state["rewards"], len(keys), "rewards", "ResponseBank")
        if len(responses) != len(keys) or not all(_is_response(r) for r in responses):
            raise StateError(
                f"ResponseBank state: 'responses' must be {len(keys)} tensors, one per key (each a tensor or a dict of "
                f"tensors); got {shown(responses)}. The checkpoint is damaged: resume from another one"
            )
        self.responses = dict(zip(keys, zip(responses, rewards, strict=True), strict=True))


def _on_cpu(response: Any) -> Response:
    """A copy of ``response`` on the CPU: its own storage, not a view of the batch it was sliced from."""
    if isinstance(response, Mapping):
        return {str(name): torch.as_tensor(value).detach().cpu().clone() for name, value in response.items()}
    return torch.as_tensor(response).detach().cpu().clone()


def _is_response(value: Any) -> bool:
    if isinstance(value, Mapping):
        return all(isinstance(name, str) and isinstance(v, torch.Tensor) for name, v in value.items())
    return isinstance(value, torch.Tensor)


EVICTION_PILOT = 8
"""The smallest pilot whose all-correct result `EvictedPrompts.check_evidence` takes as evidence of "solved"."""


class EvictedPrompts:
    """The prompts a pilot found solved (every completion correct): Pilot-Commit evicts them, never to draw again.

    Kept in the order they were evicted, so a saved and restored set is the same, key for key. Updated
    from the gathered pilot tallies, so it is the same on every rank.
    """

    def __init__(self) -> None:
        self.keys: dict[Hashable, None] = {}  # an ordered set
        self._warned = False

    def check_evidence(self, pilot: int) -> None:
        """Warn once (`PilotEvidenceWarning`) when a pilot of ``pilot`` completions is too small to evict on.

        A prompt passed with probability p is evicted on one pilot of k with probability p^k: 0.49 for p = 0.7 at
        k = 2, 0.06 at k = 8. Pilot-Commit evicts on pilots of G/4 at G >= 32; on the testbed at G = 8 (pilots of 2)
        eviction removed two thirds of the training prompts in 40 steps and the run regressed (docs/benchmarks.md).
        """
        if pilot >= EVICTION_PILOT or self._warned:
            return
        self._warned = True
        warnings.warn(
            PilotEvidenceWarning(
                f"allocation 'screen' evicts a prompt whose pilot of {pilot} completion(s) was all correct: a prompt "
                f"passed 70% of the time is evicted on its first pilot with probability {0.7**pilot:.2f}, so prompts "
                "that still carry signal leave the data for good (on the testbed at G = 8 eviction removed two "
                f"thirds of the training prompts in 40 steps and the run regressed); evict on pilots of at least "
                f"{EVICTION_PILOT} (groups of {4 * EVICTION_PILOT} or more with pilot 0.25), or set evict: false"
            ),
            stacklevel=3,
        )

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, keys: Sequence[Any], solved: torch.Tensor) -> None:
        """Evict ``keys[i]`` where ``solved (P,)`` is True."""
        for i in torch.nonzero(solved.detach().cpu()).flatten().tolist():
            self.keys[hashable_key(keys[i])] = None

    def holds(self, keys: Sequence[Any]) -> torch.Tensor:
        """``(P,)`` bool: each key is evicted."""
        return torch.tensor([hashable_key(k) in self.keys for k in keys], dtype=torch.bool)

    def state_dict(self) -> dict:
        return {"keys": list(self.keys)}

    def load_state_dict(self, state: dict) -> None:
        check_state(state, ("keys",), "EvictedPrompts")
        self.keys = dict.fromkeys(saved_field(state, "keys", list, "EvictedPrompts"))
