"""Reading a saved `DomainMixingSampler` state back: its keys, its settings, its draw fields, whether its rows fit.

`DomainMixingSampler.load_state_dict` refuses a state that is not a sampler's (`StateError`), one saved with
other draw settings (`SamplerSettingError`, which a host adapter re-raises in its own settings) and one whose
rows do not fit this sampler's data (`StateError`, naming what differs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataflex_callbacks.errors import ConfigError, StateError

STATE_KEYS = (
    "domains",
    "seed",
    "draw_size",
    "layout",
    "num_generations",
    "repeat_count",
    "chunks_per_epoch",
    "quota",
    "data",
    "pooled",
    "epoch",
    "rng",
    "perm",
    "pointers",
    "drawn_total",
    "drawn_recent",
    "epoch_rows",
    "uniforms",
    "position",
    "proportions",
)


class SamplerSettingError(ConfigError):
    """A sampler state was saved with another value of a draw setting; a host adapter re-raises it in its own words.

    Attributes: ``sampler_setting`` (the `DomainMixingSampler` argument), ``saved`` and ``current`` (its values).
    """

    def __init__(self, sampler_setting: str, saved: Any, current: Any) -> None:
        super().__init__(
            f"sampler state was saved with {sampler_setting}={saved!r}, this sampler has {current!r}; "
            "resume with the same sampler configuration"
        )
        self.sampler_setting, self.saved, self.current = sampler_setting, saved, current

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.sampler_setting, self.saved, self.current)


def check_draw_settings(state: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """Refuse (`SamplerSettingError`) a state whose draw settings (``mine``'s keys) differ from ``mine``."""
    for key, current in mine.items():
        saved = state[key]
        if key == "domains" and isinstance(saved, (list, tuple)):
            saved = [str(d) for d in saved]
        if saved != current:
            raise SamplerSettingError(key, saved, current)


@dataclass
class SavedDraws:
    """The draw fields of a saved sampler state, read into their types by `read_saved_draws`."""

    rng: np.random.Generator
    perm: np.ndarray  # (rows drawn,) int64, rows grouped by block
    uniforms: np.ndarray  # (U,) float64, the buffered uniforms not used yet
    pointers: list[int]  # next unread position in each block
    drawn_total: list[int]  # (K,)
    drawn_recent: list[list[int]]  # per-chunk (K,) counts
    epoch_rows: np.ndarray  # (chunks drawn * draw_size,) int64
    epoch: int
    position: int


def read_saved_draws(state: Mapping[str, Any]) -> SavedDraws:
    """The draw fields of ``state``; a `StateError` when one is malformed."""
    try:
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["rng"]
        saved = SavedDraws(
            rng=rng,
            perm=np.asarray(state["perm"], dtype=np.int64),
            uniforms=np.asarray(state["uniforms"], dtype=np.float64),
            pointers=[int(p) for p in state["pointers"]],
            drawn_total=[int(c) for c in state["drawn_total"]],
            drawn_recent=[[int(c) for c in counts] for counts in state["drawn_recent"]],
            epoch_rows=np.asarray([int(r) for rows in state["epoch_rows"] for r in rows], dtype=np.int64),
            epoch=int(state["epoch"]),
            position=int(state["position"]),
        )
        if not isinstance(state["proportions"], Mapping):
            raise TypeError(f"proportions is a {type(state['proportions']).__name__}")
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
        raise StateError(
            f"DomainMixingSampler.load_state_dict: the state is malformed ({type(error).__name__}: "
            f"{error}); load a dict returned by DomainMixingSampler.state_dict()"
        ) from error
    return saved


def check_saved_rows(
    saved: SavedDraws,
    block_of_row: np.ndarray,
    sizes: np.ndarray,
    *,
    domains: Sequence[str],
    draw_size: int,
    chunks_per_epoch: int,
    epoch_length: int,
) -> None:
    """Refuse (`StateError`) a state whose rows do not fit this dataset.

    Args:
        saved: the state's draw fields.
        block_of_row: ``(N,)`` each row's block under the state's pooling (-1: never drawn).
        sizes: ``(B,)`` rows of each block.
        domains, draw_size, chunks_per_epoch: this sampler's.
        epoch_length: indices per epoch (``len(sampler)``).
    """
    problem = _rows_problem(saved, block_of_row, sizes) or _progress_problem(
        saved, list(domains), draw_size, chunks_per_epoch, epoch_length, block_of_row
    )
    if problem is not None:
        raise StateError(
            f"DomainMixingSampler.load_state_dict: the state does not fit this sampler's data: "
            f"{problem}. Resume on the same dataset, or start this sampler fresh"
        )


def _rows_problem(saved: SavedDraws, block_of_row: np.ndarray, sizes: np.ndarray) -> str | None:
    """What is wrong with the saved row order and pass positions (None: nothing)."""
    perm, pointers = saved.perm, saved.pointers
    n_rows = block_of_row.shape[0]
    blocks = np.repeat(np.arange(sizes.shape[0]), sizes)
    if perm.shape != blocks.shape or (perm.size and (perm.min() < 0 or perm.max() >= n_rows)):
        return f"its row order covers {perm.shape[0]} rows, this dataset draws {blocks.shape[0]} of {n_rows}"
    if (block_of_row[perm] != blocks).any() or (np.bincount(perm, minlength=n_rows) > 1).any():
        return "its row order puts rows in other domains than this dataset's labels do"
    if len(pointers) != sizes.shape[0] or any(not 0 <= p <= s for p, s in zip(pointers, sizes.tolist(), strict=True)):
        return f"its pass positions {pointers} do not fit domain sizes {sizes.tolist()}"
    return None


def _progress_problem(
    saved: SavedDraws,
    domains: list[str],
    draw_size: int,
    chunks_per_epoch: int,
    epoch_length: int,
    block_of_row: np.ndarray,
) -> str | None:
    """What is wrong with the saved counts, epoch log, position and buffered uniforms (None: nothing)."""
    epoch_rows, uniforms = saved.epoch_rows, saved.uniforms
    if len(saved.drawn_total) != len(domains) or any(len(c) != len(domains) for c in saved.drawn_recent):
        return f"its draw counts are not over the {len(domains)} domains {domains}"
    if epoch_rows.shape[0] % draw_size or epoch_rows.shape[0] > chunks_per_epoch * draw_size:
        return f"it logs {epoch_rows.shape[0]} rows this epoch, not whole chunks of {draw_size}"
    if epoch_rows.size and (
        epoch_rows.min() < 0 or epoch_rows.max() >= block_of_row.shape[0] or (block_of_row[epoch_rows] < 0).any()
    ):
        return "its rows drawn this epoch are not rows this sampler draws"
    if not 0 <= saved.position <= epoch_length:
        return f"its position {saved.position} is outside the epoch of {epoch_length} indices"
    if uniforms.ndim != 1 or not ((uniforms >= 0) & (uniforms < 1)).all():
        return "its buffered random numbers are malformed"
    return None
