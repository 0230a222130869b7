"""Gather every rank's `RolloutBatch` into one global batch, identical on every rank.

Selection and reweighting look at the whole step (a top-k, a mean-one normalisation, a domain
statistic), so under DDP each rank decides on the global batch and keeps its own rows. Groups
are per rank: the responses of one prompt are generated on one rank, so a group id is made
global by pairing it with the rank it came from.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from dataflex_callbacks import BatchError, RolloutBatch
from dataflex_callbacks.host import ROLLOUT_FIELDS

TOKEN_FIELDS = ("logprobs", "entropies", "completion_ids")


def distributed_world() -> tuple[int, int]:
    """``(world_size, rank)`` of the default process group, ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _gather_padded(value: torch.Tensor, sizes: list[tuple[int, int]], n_max: int, l_max: int) -> torch.Tensor:
    """All-gather ``value`` (``(n,)`` or ``(n, l)``) of uneven sizes; returns the rows of all ranks in rank order."""
    dtype = value.dtype
    send = value.to(torch.uint8) if dtype == torch.bool else value  # gloo has no bool collectives
    shape = (n_max,) if value.dim() == 1 else (n_max, l_max)
    padded = send.new_zeros(shape)
    if value.dim() == 1:
        padded[: value.shape[0]] = send
    else:
        padded[: value.shape[0], : value.shape[1]] = send
    pieces = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(pieces, padded)
    rows = [piece[:n] for piece, (n, _) in zip(pieces, sizes, strict=True)]
    return torch.cat(rows).to(dtype)


def _layout(batch: RolloutBatch) -> list[int]:
    """What this rank holds, as integers every rank can compare: N, L, and one flag per field."""
    advantage_dims = 0 if batch.advantages is None else batch.advantages.dim()
    # One flag per field after rewards, in ROLLOUT_FIELDS order (advantages: its number of dims).
    flags = [
        advantage_dims if name == "advantages" else getattr(batch, name) is not None for name in ROLLOUT_FIELDS[1:]
    ]
    return [batch.n, batch.num_tokens or 0] + [int(f) for f in flags]


def gather_rollouts(batch: RolloutBatch) -> tuple[RolloutBatch, slice]:
    """The step's global batch (same on every rank) and the slice of it that holds this rank's rows.

    Token fields are padded to the longest completion over ranks; the gathered batch always has a
    completion mask when it has a token axis, so padding never counts as a valid token.
    """
    world, rank = distributed_world()
    if world == 1:
        return batch, slice(0, batch.n)
    local = torch.tensor(_layout(batch), dtype=torch.int64, device=batch.device)
    layouts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(layouts, local)
    layouts = [layout.tolist() for layout in layouts]
    for other, layout in enumerate(layouts):
        if layout[2:] != layouts[0][2:]:
            raise BatchError(
                f"ranks built different RolloutBatch fields (rank 0: {_describe(layouts[0])}; rank {other}: "
                f"{_describe(layout)}); every rank must pass the same fields to dataflex.loss"
            )
    sizes = [(layout[0], layout[1]) for layout in layouts]
    n_max = max(n for n, _ in sizes)
    l_max = max(length for _, length in sizes)
    start = sum(n for n, _ in sizes[:rank])

    def gather(value):
        return None if value is None else _gather_padded(value, sizes, n_max, l_max)

    fields = {"rewards": gather(batch.rewards)}
    for name in ("advantages",) + TOKEN_FIELDS:
        fields[name] = gather(getattr(batch, name))
    if l_max:
        fields["completion_mask"] = gather(batch.valid_mask)
    if batch.group_ids is not None:
        ids = gather(batch.group_ids)
        origin = torch.cat(
            [torch.full((n,), r, dtype=torch.int64, device=ids.device) for r, (n, _) in enumerate(sizes)]
        )
        fields["group_ids"] = torch.unique(torch.stack([origin, ids.to(torch.int64)]), dim=1, return_inverse=True)[1]
    for name in ("domains", "prompt_keys"):
        value = getattr(batch, name)
        if value is not None:
            everyone = [None] * world
            dist.all_gather_object(everyone, list(value))
            fields[name] = [item for part in everyone for item in part]
    return RolloutBatch(**fields), slice(start, start + batch.n)


def _describe(layout: list[int]) -> str:
    return ", ".join(["rewards"] + [name for name, flag in zip(ROLLOUT_FIELDS[1:], layout[2:], strict=True) if flag])
