"""The torch.distributed collectives the core runs itself, written once.

`DomainTracker`, `PromptHistory` and `DomainMixingSampler` combine what the ranks hold through these
functions; the metrics declare their states to torchmetrics instead (``dist_reduce_fx="sum"``).
Each collective is a no-op without a process group of two or more ranks. With one, every rank must
call it at the same point of its step, so each rank gets the same combined values and makes the
same decisions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def world_size_and_rank() -> tuple[int, int]:
    """``(world_size, rank)`` of the default process group; ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _collective_device() -> torch.device:
    """Where a collective's tensors must be: NCCL works on this rank's GPU, every other backend on the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum of ``values`` over ranks, a new tensor with ``values``' device and dtype;
    ``values`` itself with one rank."""
    if world_size_and_rank()[0] == 1:
        return values
    buffer = values.to(_collective_device(), copy=True)  # all_reduce writes in place; the argument stays as it was
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
    return buffer.to(values.device, values.dtype)


def all_gather_rows(rows: torch.Tensor) -> torch.Tensor:
    """Every rank's ``rows (n_r, ...)`` concatenated in rank order, with ``rows``' device; ``n_r`` may differ by rank.

    The trailing dimensions and the dtype must be the same on every rank. Each rank sends its rows
    padded to the longest rank's count; the padding is cut off again.
    """
    world = world_size_and_rank()[0]
    if world == 1:
        return rows
    device = _collective_device()
    count = torch.tensor([rows.shape[0]], device=device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    longest = int(max(c.item() for c in counts))
    padded = torch.zeros(longest, *rows.shape[1:], dtype=rows.dtype, device=device)
    padded[: rows.shape[0]] = rows.to(device)
    gathered = [torch.zeros_like(padded) for _ in counts]
    dist.all_gather(gathered, padded)
    return torch.cat([g[: int(c.item())] for g, c in zip(gathered, counts, strict=True)]).to(rows.device)


def all_gather_objects(value: Any) -> list:
    """Every rank's picklable ``value``, in rank order; ``[value]`` with one rank."""
    world = world_size_and_rank()[0]
    if world == 1:
        return [value]
    gathered: list = [None] * world
    dist.all_gather_object(gathered, value)
    return gathered
