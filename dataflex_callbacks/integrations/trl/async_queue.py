"""Where the asynchronous adapter meets TRL's rollout queue: the samples taken from it, checked and decided on.

`QueueArrivals` wraps ``AsyncGRPOTrainer.rollout_queue`` so the callback sees each sample as it is taken (its
policy version, checked by `check_policy_version`, and whether TRL drops it as stale); `ConsumedSamples` is the
stage between TRL's ``RolloutQueueDataset`` and its batcher that passes on only the samples a decision keeps
(`async_grpo` module docstring).
"""

from __future__ import annotations

import collections
import numbers
from collections.abc import Iterator
from typing import Any, Protocol

import torch

from dataflex_callbacks.errors import BatchError


class SampleConsumer(Protocol):
    """What the stage asks of the callback (`async_grpo.DataFlexAsyncCallback`)."""

    def arrived(self, sample: Any) -> None: ...

    def next_decision(self, samples: Iterator[dict]) -> list[dict]: ...


# RolloutBatch carries policy versions as int64: a larger one cannot be stored, and would overflow there.
_MAX_VERSION = torch.iinfo(torch.int64).max


def check_policy_version(version: Any, what: str, source: str) -> None:
    """Refuse a policy version that is not an int from 0 to 2**63 - 1 (`BatchError`), naming who set it and the fix.

    A version counts the trainer's weight syncs from 0: a negative one would make a sample look staler than it is
    (and a stale drop miscounted), a larger one cannot be held by `RolloutBatch.policy_versions` (int64).
    """
    if not isinstance(version, bool) and isinstance(version, numbers.Integral) and 0 <= version <= _MAX_VERSION:
        return
    fix = (
        "tag each sample with the model_version the worker last received (update_model_version), as TRL's "
        "AsyncRolloutWorker and InProcessRolloutWorker do"
        if source == "worker"
        else "leave model_version to TRL, which counts weight syncs from 0"
    )
    raise BatchError(
        f"dataflex: {what} {version!r}, which is not a policy version (an int from 0 to {_MAX_VERSION}, the weight "
        f"syncs so far); {fix}"
    )


class QueueArrivals:
    """The trainer's rollout queue, seen through: each sample taken is reported to the callback first (same thread)."""

    def __init__(self, inner, callback: SampleConsumer):
        self._inner = inner
        self.callback = callback

    def get(self, block: bool = True, timeout: float | None = None):
        sample = self._inner.get(block, timeout)
        self.callback.arrived(sample)
        return sample

    def qsize(self) -> int:
        return self._inner.qsize()

    def put_nowait(self, item) -> None:
        self._inner.put_nowait(item)


class ConsumedSamples(torch.utils.data.IterableDataset):
    """The stage between TRL's ``RolloutQueueDataset`` and its batcher:
    decide on whole groups, pass the kept samples on."""

    def __init__(self, source, callback: SampleConsumer):
        self.source = source
        self.callback = callback

    def __iter__(self):
        samples = iter(self.source)
        ready: collections.deque = collections.deque()
        while True:
            while not ready:
                ready.extend(self.callback.next_decision(samples))
            yield ready.popleft()
