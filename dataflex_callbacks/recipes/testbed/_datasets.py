"""The testbed's datasets: the train mix and held-out sizes per level, and a split's rows as a list or JSON lines.

`testbed_dataset` is what `dataflex run` trains and evaluates on with the built-in testbed (docs/testbed.md);
`write_jsonl` writes the same rows for ``dataflex run --dataset`` / ``--eval-dataset``.
"""

from __future__ import annotations

import json
import os
import random

from dataflex_callbacks.errors import InputError

from ._tasks import SPLITS, check_levels, split_capacity, testbed_rows

# The levels the headline measures (held-out sampled pass@1 on them): those the shipped model solves sometimes,
# where RL moves the pass rate (docs/testbed.md); every level is still reported apart.
HEADLINE_LEVELS = ("add3", "sub3", "sub4")
# Rows per level of each split in `testbed_dataset` (the `pretrain` split is sampled by the build). The train mix
# (docs/testbed.md): 400 prompts of each headline level; add4, which the model mostly solves; add2, which it rarely
# solves; add5 and sort8, which it never solves (never taught). Half of the training groups carry no signal at the
# start, as in real RLVR data, and the default comparison budget (`recipes/options.py`) passes through the 2,100
# prompts 3 times.
TRAIN_ROWS = {
    "add2": 100,
    "add3": 400,
    "add4": 200,
    "add5": 300,
    "sub3": 400,
    "sub4": 400,
    "sort8": 300,
}
# Held-out rows: 400 per headline level (paired differences of 0.02 in the headline resolve over seeds), 100 for
# the other levels of the train mix.
EVAL_ROWS = {name: 400 if name in HEADLINE_LEVELS else 100 for name in TRAIN_ROWS}
SPLIT_ROWS = {"train": TRAIN_ROWS, "calibration": 48, "eval": EVAL_ROWS}
# Rows of each split for a level outside the train mix (`--domains mul1x2`), or all its split holds when fewer.
OTHER_LEVEL_ROWS = 100


def default_rows(split: str, levels) -> dict[str, int]:
    """Rows per level of `split` (`train` or `eval`) for `levels`: the mix's (`SPLIT_ROWS`), and for a level outside
    it `OTHER_LEVEL_ROWS`, or all that level's split holds when fewer (mul1x2 holds 65 train prompts)."""
    if split not in ("train", "eval"):
        raise InputError(f"default_rows covers the train and eval splits, not {split!r}")
    mix = SPLIT_ROWS[split]
    return {
        level.name: mix.get(level.name) or min(OTHER_LEVEL_ROWS, split_capacity(level.name, split))
        for level in check_levels(levels)
    }


def testbed_dataset(
    seed: int = 0, split: str = "train", per_level: int | dict[str, int] | None = None, levels=None
) -> list[dict]:
    """Rows of one split for training or evaluation: `prompt`, `answer`, `domain` (the level), `difficulty`.

    `per_level` is rows per level: one int >= 1, or ``{level: rows}``. It defaults to `SPLIT_ROWS[split]`, and for
    `levels` named outside the train mix on `train` / `eval` to `default_rows` (`pretrain` has no default: pass
    `per_level`). `levels`: level names, one name (``"add3"``), or None (the train mix, or `per_level`'s levels).
    `train` rows are shuffled (by `seed`), the others stay level after level. Same arguments, same rows.
    Raises `InputError` for an unknown split or level, a level named twice, a count below 1 (or a dict asking for
    no row), or more rows than a level's split holds; `ArgumentError` for a count that is not an int (1.5, True).
    """
    if split not in SPLITS:
        raise InputError(f"unknown testbed split {split!r}; choose one of {', '.join(SPLITS)}")
    if per_level is None and split not in SPLIT_ROWS:
        raise InputError(
            f"testbed split {split!r} has no default size; pass per_level (rows per level), or choose one of "
            f"{', '.join(SPLIT_ROWS)}"
        )
    count = SPLIT_ROWS[split] if per_level is None else per_level
    if per_level is None and levels is not None and split in ("train", "eval"):
        count = default_rows(split, levels)  # a level outside the mix gets OTHER_LEVEL_ROWS, not 0 rows
    rows = testbed_rows(split, seed=seed, per_level=count, levels=levels)
    if split == "train":
        random.Random(f"dataflex-testbed-order:{seed}").shuffle(rows)
    return rows


def write_jsonl(
    path: str | os.PathLike,
    seed: int = 0,
    split: str = "train",
    per_level: int | dict[str, int] | None = None,
    levels=None,
) -> str:
    """Write `testbed_dataset(seed, split, ...)` as JSON lines, for ``dataflex run --dataset`` / ``--eval-dataset``."""
    rows = testbed_dataset(seed, split, per_level, levels)  # a bad split or size fails before a file is written
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    return path
