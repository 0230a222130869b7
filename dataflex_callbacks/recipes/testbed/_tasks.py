"""Graded verifiable tasks: arithmetic and digit sorting, difficulty as a dial, answers checked exactly.

A **level** is one task family at one setting of its dial (operand lengths, list length) and is one
domain of the dataset. Inside a level the difficulty of a prompt still varies (how many carries an
addition has, how many borrows a subtraction, how far a list is from sorted), and each row records
that count in its `difficulty` column, as real data mixes easy and hard prompts under one label.

Arithmetic is written **least-significant digit first**, operands and answer alike (``74+83=`` asks
for 47 + 38 and expects ``58``, meaning 85): the reversed format of "Teaching Arithmetic to Small
Transformers" (arXiv 2307.03381) applied to the operands too, so each answer digit sits at a fixed
distance from the operand digits it depends on and a small model learns the columns, carrying as it
writes, in minutes on a CPU. Sorting answers are the sorted digits. The reference answer is the
exact completion expected, so a verifier compares strings, never numbers: ``04`` (40) is not ``4``.

Which split a prompt belongs to is a function of the prompt's text alone (a hash), so the splits
never share a prompt whatever the seed or the sizes asked for:

| split | share of each level's prompts | use |
|---|---|---|
| `pretrain` | 70% | supervised worked examples for building the model |
| `train` | 10% | RL training prompts |
| `calibration` | 10% | choosing levels and the prompt mix, apart from evaluation |
| `eval` | 10% | held-out accuracy |
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import numbers
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from dataflex_callbacks.errors import ArgumentError, InputError

SPLITS = ("pretrain", "train", "calibration", "eval")
# Hash buckets (of 10) per split: see the module docstring.
_SPLIT_BUCKETS = {"eval": (0,), "calibration": (1,), "train": (2,), "pretrain": (3, 4, 5, 6, 7, 8, 9)}
_BUCKET_OF = {bucket: name for name, buckets in _SPLIT_BUCKETS.items() for bucket in buckets}


def split_of(prompt: str) -> str:
    """The split a prompt belongs to: a fixed function of its text (`SPLITS`)."""
    bucket = int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=4).digest(), "little") % 10
    return _BUCKET_OF[bucket]


def _operands(digits: int) -> range:
    """The numbers of `digits` digits (one digit: 0-9)."""
    return range(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


def _number(rng: random.Random, digits: int) -> int:
    operands = _operands(digits)
    return rng.randrange(operands.start, operands.stop)


def _reversed(value: int) -> str:
    return str(value)[::-1]


def _carries(a: int, b: int) -> int:
    """Carries in the column addition a + b."""
    count = carry = 0
    while a or b:
        carry = 1 if a % 10 + b % 10 + carry >= 10 else 0
        count += carry
        a, b = a // 10, b // 10
    return count


def _borrows(a: int, b: int) -> int:
    """Borrows in the column subtraction a - b (a >= b)."""
    count = borrow = 0
    while a or b:
        borrow = 1 if a % 10 - b % 10 - borrow < 0 else 0
        count += borrow
        a, b = a // 10, b // 10
    return count


def _product_carries(digit: int, b: int) -> int:
    """Columns of digit * b that pass a non-zero carry on."""
    count = carry = 0
    while b:
        carry = (digit * (b % 10) + carry) // 10
        count += carry > 0
        b //= 10
    return count


# Each generator is a callable ``rng -> (prompt, answer, difficulty)`` that can also list every prompt it
# writes (`prompts`) and count them (`prompt_count`), so a request for more rows than a split holds is
# refused from the count, not found out by sampling.


@dataclass(frozen=True)
class _Add:
    digits_a: int
    digits_b: int

    def __call__(self, rng: random.Random) -> tuple[str, str, int]:
        a, b = _number(rng, self.digits_a), _number(rng, self.digits_b)
        return f"{_reversed(a)}+{_reversed(b)}=", _reversed(a + b), _carries(a, b)

    @property
    def prompt_count(self) -> int:
        return len(_operands(self.digits_a)) * len(_operands(self.digits_b))

    def prompts(self) -> Iterator[str]:
        right = [_reversed(b) for b in _operands(self.digits_b)]
        for a in _operands(self.digits_a):
            left = _reversed(a)
            yield from (f"{left}+{b}=" for b in right)


@dataclass(frozen=True)
class _Sub:
    """Both operands of `digits` digits, the larger first."""

    digits: int

    def __call__(self, rng: random.Random) -> tuple[str, str, int]:
        a, b = _number(rng, self.digits), _number(rng, self.digits)
        a, b = max(a, b), min(a, b)
        return f"{_reversed(a)}-{_reversed(b)}=", _reversed(a - b), _borrows(a, b)

    @property
    def prompt_count(self) -> int:
        n = len(_operands(self.digits))
        return n * (n + 1) // 2

    def prompts(self) -> Iterator[str]:
        operands = _operands(self.digits)
        for a in operands:
            left = _reversed(a)
            yield from (f"{left}-{_reversed(b)}=" for b in range(operands.start, a + 1))


@dataclass(frozen=True)
class _Mul:
    """A digit 2-9 times a number of `digits_b` digits."""

    digits_b: int

    def __call__(self, rng: random.Random) -> tuple[str, str, int]:
        digit, b = rng.randrange(2, 10), _number(rng, self.digits_b)
        return f"{digit}*{_reversed(b)}=", _reversed(digit * b), _product_carries(digit, b)

    @property
    def prompt_count(self) -> int:
        return 8 * len(_operands(self.digits_b))

    def prompts(self) -> Iterator[str]:
        for digit in range(2, 10):
            yield from (f"{digit}*{_reversed(b)}=" for b in _operands(self.digits_b))


@dataclass(frozen=True)
class _Sort:
    length: int

    def __call__(self, rng: random.Random) -> tuple[str, str, int]:
        digits = [rng.randrange(10) for _ in range(self.length)]
        inversions = sum(x > y for i, x in enumerate(digits) for y in digits[i + 1 :])
        return "sort " + "".join(map(str, digits)) + ":", "".join(map(str, sorted(digits))), inversions

    @property
    def prompt_count(self) -> int:
        return 10**self.length

    def prompts(self) -> Iterator[str]:
        return (f"sort {digits}:" for digits in map("".join, itertools.product("0123456789", repeat=self.length)))


@dataclass(frozen=True)
class Level:
    """One task family at one setting of its difficulty dial: a domain of the testbed.

    Attributes:
        name: the domain label (`add3`, `sort6`, ...).
        family: `add`, `sub`, `mul` or `sort`.
        description: one line: the prompt form and what varies inside the level.
        make_example: ``rng -> (prompt, answer, difficulty)``; `difficulty` counts carries, borrows or
            inversions, the per-prompt dial inside the level. It also lists every prompt it writes
            (``make_example.prompts()``) and counts them (``make_example.prompt_count``).
        max_answer_chars: the longest answer the level can ask for.
    """

    name: str
    family: str
    description: str
    make_example: _Add | _Sub | _Mul | _Sort
    max_answer_chars: int


LEVELS: dict[str, Level] = {
    level.name: level
    for level in (
        Level("add2", "add", "2-digit + 2-digit, 0-2 carries", _Add(2, 2), 3),
        Level("add3", "add", "3-digit + 3-digit, 0-3 carries", _Add(3, 3), 4),
        Level("add4", "add", "4-digit + 4-digit, 0-4 carries", _Add(4, 4), 5),
        Level("add5", "add", "5-digit + 5-digit, 0-5 carries", _Add(5, 5), 6),
        Level("sub3", "sub", "3-digit - up to 3-digit (larger first), 0-2 borrows", _Sub(3), 3),
        Level("sub4", "sub", "4-digit - up to 4-digit (larger first), 0-3 borrows", _Sub(4), 4),
        Level("mul1x2", "mul", "digit 2-9 * 2-digit, 0-2 carrying columns", _Mul(2), 3),
        Level("mul1x3", "mul", "digit 2-9 * 3-digit, 0-3 carrying columns", _Mul(3), 4),
        Level("mul1x4", "mul", "digit 2-9 * 4-digit, 0-4 carrying columns", _Mul(4), 5),
        Level("sort5", "sort", "sort 5 digits ascending, 0-10 inversions", _Sort(5), 5),
        Level("sort8", "sort", "sort 8 digits ascending, 0-28 inversions", _Sort(8), 8),
    )
}


def _level_names(levels) -> list[str]:
    """The level names `levels` asks for: all of them for None, one for a single name, else each item."""
    if levels is None:
        return list(LEVELS)
    if isinstance(levels, str):  # a single level name, not its letters
        return [levels]
    try:
        return list(levels)
    except TypeError:
        raise ArgumentError(
            f"testbed levels must be a level name or a list of them; got {levels!r} ({type(levels).__name__}); "
            f"pass e.g. levels=['add3', 'sub3'] (the levels: {', '.join(LEVELS)}), or None for all"
        ) from None


def check_levels(levels) -> list[Level]:
    """The `Level`s `levels` names (names, one name, or None for all); refuses an unknown level or one named twice."""
    names = _level_names(levels)
    unknown = [name for name in names if name not in LEVELS]
    if unknown or not names:
        raise InputError(f"unknown testbed level(s) {unknown or names!r}; choose from {', '.join(LEVELS)}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InputError(
            f"testbed level(s) {', '.join(map(repr, twice))} named twice in {names!r}; name each level once "
            "(a level named twice would give its rows twice)"
        )
    return [LEVELS[name] for name in names]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise InputError(f"unknown testbed split {split!r}; choose one of {', '.join(SPLITS)}")


# A level of at most this many prompts is counted exactly, split by split (add3's 810,000 prompts: about 1 s).
_EXACT_COUNT_LIMIT = 2_000_000
# Standard deviations below the expected split size that a count certainly clears (the hash split is binomial).
_SAFE_DEVIATIONS = 6


def _expected_size(level: Level, split: str) -> tuple[float, float]:
    """Mean and standard deviation of the number of `level`'s prompts that hash into `split`."""
    share = len(_SPLIT_BUCKETS[split]) / 10
    count = level.make_example.prompt_count
    return count * share, math.sqrt(count * share * (1 - share))


@functools.cache
def _exact_split_size(level: str, split: str) -> int:
    return sum(split_of(prompt) == split for prompt in LEVELS[level].make_example.prompts())


def split_capacity(level: str, split: str) -> int:
    """The most distinct rows `level_rows(level, split, ...)` can return: the level's prompts that fall in `split`.

    Exact (counted once per process) for a level of at most 2,000,000 prompts; for a larger one a
    lower bound, 6 standard deviations under the expected count (millions of rows: more than a run asks for).
    """
    (found,) = check_levels([level])
    _check_split(split)
    if found.make_example.prompt_count <= _EXACT_COUNT_LIMIT:
        return _exact_split_size(level, split)
    mean, deviation = _expected_size(found, split)
    return int(mean - _SAFE_DEVIATIONS * deviation)


def levels_short_of(split: str, count: int, levels=None) -> dict[str, int]:
    """``{level: split_capacity}`` for each of `levels` (default: all) that holds fewer than `count` prompts in `split`.

    Counts nothing when `count` is far below a level's expected split size, so the usual sizes cost no time.
    """
    short = {}
    for level in check_levels(levels):
        _check_split(split)
        mean, deviation = _expected_size(level, split)
        if count <= mean - _SAFE_DEVIATIONS * deviation:
            continue
        most = split_capacity(level.name, split)
        if count > most:
            short[level.name] = most
    return short


def _row_count(count, argument: str, least: int) -> int:
    """`count` as an int of at least `least`; refuses a bool, a float (1.5 rows) and a count below `least`."""
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        raise ArgumentError(
            f"testbed {argument} must be a whole number of rows; got {count!r} ({type(count).__name__}); "
            f"pass an int >= {least}"
        )
    if count < least:
        raise InputError(f"testbed {argument}={count} is not a row count; pass an int >= {least} (rows per level)")
    return int(count)


def _level_counts(per_level, levels) -> list[tuple[Level, int]]:
    """``(level, rows)`` for each level `testbed_rows` serves, a level of 0 rows left out; refuses a bad count, and
    counts that ask for no row at all (an empty dataset trains nothing)."""
    if isinstance(per_level, Mapping):
        levels = list(per_level) if levels is None else levels
        chosen = check_levels(levels)
        counts = [
            (level, _row_count(per_level.get(level.name, 0), f"per_level[{level.name!r}]", 0)) for level in chosen
        ]
    else:
        count = _row_count(per_level, "per_level", 1)
        counts = [(level, count) for level in check_levels(levels)]
    counts = [(level, count) for level, count in counts if count]
    if not counts:
        raise InputError(
            f"testbed per_level={per_level!r} asks for no rows of the levels {_level_names(levels)!r}; give at least "
            "one of them a count >= 1"
        )
    return counts


def level_rows(level: str, split: str, count: int, seed: int = 0) -> list[dict]:
    """`count` distinct rows of one level in one split, drawn from `seed` (same arguments, same rows, same order).

    Each row: `prompt`, `answer`, `domain` (the level), `difficulty` (carries, borrows or inversions).
    Raises `InputError` at once when the split of this level holds fewer distinct prompts than asked for
    (`split_capacity`), naming the most it holds.
    """
    (found,) = check_levels([level])
    _check_split(split)
    count = _row_count(count, "count", 0)
    short = levels_short_of(split, count, [level])
    if short:
        raise InputError(
            f"testbed level {level!r} holds {short[level]:,} distinct {split} prompts, and {count:,} rows were "
            f"asked for; ask for at most {short[level]:,}"
        )
    rng = random.Random(f"dataflex-testbed:{seed}:{level}:{split}")
    rows: list[dict] = []
    seen: set[str] = set()
    misses = 0
    while len(rows) < count:
        prompt, answer, difficulty = found.make_example(rng)
        if prompt in seen or split_of(prompt) != split:
            misses += 1
            if misses > 200 * (count + 10):
                raise InputError(
                    f"testbed level {level!r} has too few distinct {split} prompts for {count} rows "
                    f"(found {len(rows)}); ask for fewer"
                )
            continue
        seen.add(prompt)
        rows.append({"prompt": prompt, "answer": answer, "domain": level, "difficulty": difficulty})
    return rows


def testbed_rows(split: str, seed: int = 0, per_level: int | dict[str, int] = 100, levels=None) -> list[dict]:
    """Rows of several levels in one split, level after level (`per_level`: one count, or a count per level).

    `levels`: level names, one name (``"add3"``), or None for all (for a dict `per_level`: its levels).
    A count is an int: one count must be >= 1; in a dict a level with count 0 is left out, but not every level.
    The order is the levels' order, so shuffle for training.
    """
    rows: list[dict] = []
    for level, count in _level_counts(per_level, levels):
        rows.extend(level_rows(level.name, split, count, seed))
    return rows


def slipped_answer(prompt: str, rng: random.Random, slip: float) -> str:
    """The answer to an arithmetic `prompt` worked column by column,
    each carry (or borrow) dropped with probability `slip`.

    This is how the build's worked examples err: a systematic slip, like a student who forgets to carry,
    that the model learns as a habit it sometimes does not have, so it samples right answers it does not
    yet give greedily. `slip=0` gives the right answer. Sorting prompts are returned sorted, without slips.
    """
    if prompt.startswith("sort "):
        return "".join(sorted(prompt[len("sort ") : -1]))
    body = prompt.rstrip("=")
    symbol = next(s for s in "+-*" if s in body)
    left, right = body.split(symbol)
    if symbol == "*":
        digit, columns = int(left), [int(c) for c in right]
        out, carry = [], 0
        for column in columns:
            product = digit * column + carry
            out.append(product % 10)
            carry = product // 10
            if carry and rng.random() < slip:
                carry = 0
        out.extend(int(c) for c in str(carry)[::-1] if carry)
    else:
        a, b = [int(c) for c in left], [int(c) for c in right]
        width = max(len(a), len(b))
        a, b = a + [0] * (width - len(a)), b + [0] * (width - len(b))
        out, carry = [], 0
        for x, y in zip(a, b, strict=True):
            value = x + y + carry if symbol == "+" else x - y - carry
            if symbol == "+":
                out.append(value % 10)
                carry = value // 10
            else:
                out.append(value % 10)
                carry = 1 if value < 0 else 0
            if carry and rng.random() < slip:
                carry = 0
        if symbol == "+" and carry:
            out.append(carry)
    text = "".join(map(str, out)).rstrip("0")  # least-significant first: trailing zeros are leading ones
    return text or "0"
