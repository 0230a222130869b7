"""`RolloutBatch`: the signals one RL training step already produced, validated once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Optional, Sequence

import numpy as np
import torch

from .errors import BatchError

_FIELDS = ("rewards", "group_ids", "completion_mask", "advantages", "logprobs", "entropies", "domains", "prompt_keys",
           "completion_ids")


@dataclass(eq=False)
class RolloutBatch:
    """One batch of scored rollouts, as the host trainer computed them.

    Build it from the tensors your trainer already has; every field but ``rewards`` is
    optional, and a strategy that needs a missing field says so by name.

    Attributes:
        rewards: ``(N,)`` float outcome reward per response. Non-finite values are allowed;
            the strategy's ``nan_policy`` decides what they mean.
        group_ids: ``(N,)`` int; responses to one prompt share an id. Groups may have unequal
            sizes and need not be contiguous.
        completion_mask: ``(N, L)`` bool or 0/1; valid completion tokens.
        advantages: ``(N,)`` or ``(N, L)`` float.
        logprobs: ``(N, L)`` per-token log-probabilities (old policy at rollout time, or the
            current policy inside the loss).
        entropies: ``(N, L)`` per-token policy entropies.
        domains: ``N`` domain labels (strings).
        prompt_keys: ``N`` stable per-prompt keys (for history-based strategies).
        completion_ids: ``(N, L)`` integer token ids of the completions (positions outside
            ``completion_mask`` are ignored); lets pre-rollout selection notice rewards that
            disagree on identical completions.
    """

    rewards: torch.Tensor
    group_ids: Optional[torch.Tensor] = None
    completion_mask: Optional[torch.Tensor] = None
    advantages: Optional[torch.Tensor] = None
    logprobs: Optional[torch.Tensor] = None
    entropies: Optional[torch.Tensor] = None
    domains: Optional[Sequence[str]] = None
    prompt_keys: Optional[Sequence[Hashable]] = None
    completion_ids: Optional[torch.Tensor] = None
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rewards, torch.Tensor):
            raise BatchError(f"RolloutBatch.rewards must be a torch.Tensor of shape (N,); got {type(self.rewards).__name__}")
        if self.rewards.dim() != 1:
            raise BatchError(f"RolloutBatch.rewards must have shape (N,); got {tuple(self.rewards.shape)}")
        if not self.rewards.is_floating_point():
            raise BatchError(f"RolloutBatch.rewards must be a float tensor; got dtype {self.rewards.dtype}. Use rewards.float().")
        n = self.rewards.shape[0]
        device = self.rewards.device
        length = None

        def check_tensor(name: str, value: torch.Tensor, allowed_dims: tuple[int, ...]) -> None:
            if not isinstance(value, torch.Tensor):
                raise BatchError(f"RolloutBatch.{name} must be a torch.Tensor; got {type(value).__name__}")
            if value.device != device:
                raise BatchError(f"RolloutBatch.{name} is on {value.device} but rewards are on {device}; move every field to one device")
            if value.dim() not in allowed_dims or value.shape[0] != n:
                want = " or ".join("(N,)" if d == 1 else "(N, L)" for d in allowed_dims)
                raise BatchError(f"RolloutBatch.{name} must have shape {want} with N={n}; got {tuple(value.shape)}")

        if self.group_ids is not None:
            check_tensor("group_ids", self.group_ids, (1,))
            if self.group_ids.is_floating_point() or self.group_ids.dtype == torch.bool:
                raise BatchError(f"RolloutBatch.group_ids must be an integer tensor; got dtype {self.group_ids.dtype}")
        if self.completion_mask is not None:
            check_tensor("completion_mask", self.completion_mask, (2,))
            length = self.completion_mask.shape[1]
        for name in ("advantages", "logprobs", "entropies"):
            value = getattr(self, name)
            if value is None:
                continue
            check_tensor(name, value, (1, 2) if name == "advantages" else (2,))
            if not value.is_floating_point():
                raise BatchError(f"RolloutBatch.{name} must be a float tensor; got dtype {value.dtype}")
            if value.dim() == 2:
                if length is None:
                    length = value.shape[1]
                elif value.shape[1] != length:
                    raise BatchError(
                        f"RolloutBatch.{name} has L={value.shape[1]} tokens but other token fields have L={length}"
                    )
        if self.completion_ids is not None:
            check_tensor("completion_ids", self.completion_ids, (2,))
            if self.completion_ids.is_floating_point() or self.completion_ids.dtype == torch.bool:
                raise BatchError(f"RolloutBatch.completion_ids must be an integer tensor; got dtype {self.completion_ids.dtype}")
            if length is not None and self.completion_ids.shape[1] != length:
                raise BatchError(f"RolloutBatch.completion_ids has L={self.completion_ids.shape[1]} tokens but other "
                                 f"token fields have L={length}")
        for name in ("domains", "prompt_keys"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
                raise BatchError(f"RolloutBatch.{name} must be a sequence of N={n} items; got {type(value).__name__}")
            if len(value) != n:
                raise BatchError(f"RolloutBatch.{name} has {len(value)} items but rewards has N={n}")
        if self.domains is not None and not all(isinstance(d, str) for d in self.domains):
            bad = next(d for d in self.domains if not isinstance(d, str))
            raise BatchError(f"RolloutBatch.domains must hold strings; found {bad!r} ({type(bad).__name__})")

    @property
    def n(self) -> int:
        """Number of responses N."""
        return self.rewards.shape[0]

    @property
    def device(self) -> torch.device:
        return self.rewards.device

    @property
    def num_tokens(self) -> Optional[int]:
        """L, the padded completion length, when any token-level field is present."""
        for name in ("completion_mask", "logprobs", "entropies", "advantages"):
            value = getattr(self, name)
            if value is not None and value.dim() == 2:
                return value.shape[1]
        return None

    @property
    def valid_mask(self) -> Optional[torch.Tensor]:
        """``(N, L)`` bool mask of valid tokens, or None when the batch has no token axis."""
        if "valid_mask" not in self._cache:
            if self.completion_mask is not None:
                mask = self.completion_mask if self.completion_mask.dtype == torch.bool else self.completion_mask != 0
            else:
                length = self.num_tokens
                mask = None if length is None else torch.ones(self.n, length, dtype=torch.bool, device=self.device)
            self._cache["valid_mask"] = mask
        return self._cache["valid_mask"]

    @property
    def lengths(self) -> torch.Tensor:
        """``(N,)`` float number of valid tokens per response (1 when the batch has no token axis)."""
        if "lengths" not in self._cache:
            mask = self.valid_mask
            if mask is None:
                lengths = torch.ones(self.n, device=self.device)
            else:
                lengths = mask.sum(dim=1, dtype=torch.float32)
            self._cache["lengths"] = lengths
        return self._cache["lengths"]

    def domain_codes(self) -> tuple[list[str], np.ndarray]:
        """Distinct domain labels (sorted) and each row's index into them; computed once per batch."""
        if self.domains is None:
            raise BatchError("RolloutBatch.domains is not set; pass domains=[...] (one label per response)")
        if "domain_codes" not in self._cache:
            labels = sorted(set(self.domains))
            lookup = {label: i for i, label in enumerate(labels)}
            codes = np.fromiter(map(lookup.__getitem__, self.domains), dtype=np.int64, count=self.n)
            self._cache["domain_codes"] = (labels, codes)
        return self._cache["domain_codes"]

    def replace(self, **changes) -> "RolloutBatch":
        """A copy with some fields replaced (validated again)."""
        values = {name: getattr(self, name) for name in _FIELDS}
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise BatchError(f"RolloutBatch has no field(s) {sorted(unknown)}; fields are {list(_FIELDS)}")
        values.update(changes)
        return RolloutBatch(**values)

    def has(self, name: str) -> bool:
        """Whether the signal ``name`` is available (``completion_mask`` counts as present if derivable)."""
        if name == "completion_mask":
            return self.valid_mask is not None
        return getattr(self, name) is not None
