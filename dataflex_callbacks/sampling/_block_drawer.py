"""`BlockDrawer`: draws a sampler's rows from shuffled blocks (one per domain, or one pool), a chunk at a time.

Rows are drawn without replacement within a block, which is reshuffled when it runs out. Every
chunk reads one stream of uniforms (drawn from the generator in blocks), and small chunks are drawn
ahead several at a time while the proportions stay the same (the draw-ahead cache); the rows and
the random state are the same whichever path served a chunk. The drawer owns the generator, the
passes and the per-domain counts; `DomainMixingSampler` holds one and asks it for each chunk.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from dataflex_callbacks.components.prompt_acceptance import Candidates
from dataflex_callbacks.errors import ConfigError, RepeatedRowWarning, user_stacklevel
from dataflex_callbacks.sampling._sampler_state import SavedDraws

if TYPE_CHECKING:  # pragma: no cover
    from dataflex_callbacks.strategy.strategy import Strategy

RECENT_CHUNKS = 20  # chunks in the "recent" actual-proportion window
UNIFORM_BLOCK = 4096  # uniforms drawn per generator call
SMALL_CHUNK = 32  # chunks up to this many prompts are drawn ahead, several at a time
PREFETCH_CHUNKS = 64  # small chunks drawn in one vectorised step while the proportions stay the same
TIE_TOLERANCE = 1e-9  # quota remainders this close count as equal (float noise, e.g. 0.1 * 30)


def largest_remainder_quotas(proportions: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """Per-domain counts that sum to ``n`` and follow ``proportions`` as closely as whole numbers can.

    Hamilton's (largest-remainder) rule, as DataFlex-RL's replay buffer fills a batch: each domain
    gets ``floor(n * p_d)``, and the ``n - sum(floors)`` prompts left go one each to the domains with
    the largest remainders ``n * p_d - floor(n * p_d)``. Equal remainders (within 1e-9, so float
    noise cannot break a tie) go to the domain listed first; a domain with proportion 0 gets none.

    Args:
        proportions: ``(K,)`` non-negative, summing to 1 (renormalised here).
        n: batch size, ``>= 0``.

    Returns:
        ``(K,)`` int64 counts summing to ``n``.
    """
    p = np.asarray(proportions, dtype=np.float64)
    scaled = n * p / p.sum()
    counts = np.floor(scaled + TIE_TOLERANCE).astype(np.int64)
    remainder = np.where(p > 0, np.round(np.maximum(scaled - counts, 0.0) / TIE_TOLERANCE) * TIE_TOLERANCE, -1.0)
    left = n - int(counts.sum())
    if left > 0:
        order = np.lexsort((np.arange(p.shape[0]), -remainder))  # largest remainder first, then domain order
        counts[order[:left]] += 1
    return counts


class _Ahead(TypedDict):
    """The drawn-ahead block of small chunks: ``chunks`` chunks of ``n`` rows under one proportions array."""

    proportions: np.ndarray  # the array the block was drawn under (identity: a new array ends the block)
    rows: list[int]  # (chunks * n,) the rows, chunk after chunk
    chosen: np.ndarray  # (chunks * n,) each draw's block
    domains: np.ndarray  # (chunks * n,) each draw's domain, what the bookkeeping counts
    chunks: int
    pos: int  # chunks served
    booked: int  # chunks counted in drawn_total / drawn_recent
    n: int


class BlockDrawer:
    """The drawing half of `DomainMixingSampler`: blocks, passes, uniforms, quotas, the draw-ahead cache, counts.

    Args:
        domains: the ``K`` domains drawn, in order.
        domain_of_row: ``(N,)`` int64, each row's index into ``domains`` (-1: a row never drawn).
        domain_sizes: ``(K,)`` int64, rows of each domain.
        pooled: draw from all rows as one block (else one block per domain); `start_mixing` switches.
        quota: ``"independent"`` or ``"exact"`` (see `DomainMixingSampler`).
        seed: seeds the generator of every draw; building the drawer shuffles every block, its first use.
        strategy: with a mix part it hears of every chunk's per-domain counts (``observe_sampled``);
            with a pre-rollout filter (``skips_prompts``) it accepts the rows of each block.
        keys: ``(N,)`` each row's prompt key, for the filter (needed with one).
        prompt_labels: ``(N,)`` each row's domain for the filter's prior on unseen prompts (None: no prior).
        labels_while_pooled: ``prompt_labels`` are the pool's default prior, dropped once draws go by domain.
        shard: the chunk is every rank's prompts of one step (a warning's wording).
    """

    def __init__(
        self,
        domains: Sequence[str],
        domain_of_row: np.ndarray,
        domain_sizes: np.ndarray,
        *,
        pooled: bool,
        quota: str,
        seed: int,
        strategy: Strategy | None = None,
        keys: Sequence[Hashable] | None = None,
        prompt_labels: Sequence[str] | None = None,
        labels_while_pooled: bool = False,
        shard: bool = False,
    ) -> None:
        self.domains = list(domains)
        self.quota = quota
        self._domain_of_row = domain_of_row
        self._domain_sizes = domain_sizes
        self._mixing_strategy = strategy if strategy is not None and strategy.mix_enabled else None
        self._filter: tuple[Strategy, Sequence[Hashable]] | None = None  # the filtering strategy, each row's key
        if strategy is not None and strategy.skips_prompts:
            if keys is None:
                raise ConfigError("BlockDrawer: a strategy that skips prompts needs each row's prompt key (keys=...)")
            self._filter = (strategy, keys)
        self._prompt_labels = prompt_labels
        self._labels_while_pooled = labels_while_pooled
        self._shard = shard
        self._cumulative_of: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        self._quota_of: tuple[np.ndarray | None, int | None, np.ndarray | None] = (None, None, None)
        # Per-domain bookkeeping as plain int lists: cheaper than numpy for a few domains per chunk.
        self._drawn_total = [0] * len(self.domains)
        self._drawn_recent: deque[list[int]] = deque(maxlen=RECENT_CHUNKS)  # per-chunk counts, lists of K ints
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._uniform_buffer = np.empty(0)  # uniforms drawn ahead in blocks (one generator call per block)
        self._uniform_pos = 0  # next unused entry of the buffer
        self._ahead: _Ahead | None = None  # small chunks drawn ahead under one proportions array
        self._pool_array = np.ones(1)  # a pooled drawer draws its one block with probability 1
        self._warned_repeated_rows = False  # a batch that must repeat rows warns once (`RepeatedRowWarning`)
        self._build_blocks(pooled)  # shuffles every block: the stream's first use of the generator

    # ------------------------------------------------------------ what the sampler reads and switches

    @property
    def pooled(self) -> bool:
        """True while all rows are one block (no draw by domain)."""
        return self._pooled

    @property
    def prompt_labels(self) -> Sequence[str] | None:
        """``(N,)`` each row's domain as the filter's prior reads it (None: no prior)."""
        return self._prompt_labels

    def start_mixing(self) -> None:
        """Go from one pool to one block per domain before the next chunk (the served chunks stay counted)."""
        self._rollback_ahead()
        self._build_blocks(pooled=False)
        if self._labels_while_pooled:  # the draw now fixes the domain: no domain prior
            self._prompt_labels = None

    def drawn_total(self) -> np.ndarray:
        """``(K,)`` prompts drawn per domain since the start."""
        self._book_served()
        return np.array(self._drawn_total, dtype=np.int64)

    def drawn_recent(self) -> deque[list[int]]:
        """Per-domain counts of the last few chunks (lists of K ints), oldest first."""
        self._book_served()
        return self._drawn_recent

    def state_dict(self) -> dict[str, Any]:
        """``pooled``, ``rng``, ``perm``, ``pointers``, ``drawn_total``, ``drawn_recent``, ``uniforms``: as if only
        the served chunks had been drawn, in plain values; reading it changes nothing."""
        drawn_total, drawn_recent = self._booked_counts()
        pointers, uniform_pos = self._unserved()
        return {
            "pooled": self._pooled,
            "rng": self._rng.bit_generator.state,
            "perm": self._perm.tolist(),
            "pointers": pointers,
            "drawn_total": drawn_total,
            "drawn_recent": drawn_recent,
            "uniforms": self._uniform_buffer[uniform_pos:].tolist(),
        }

    def restore(self, pooled: bool, saved: SavedDraws) -> None:
        """Continue from a saved state (checked by the caller against `blocks_for`); no chunk is drawn ahead."""
        self._set_blocks(pooled, saved.perm)
        if not pooled and self._labels_while_pooled:  # switched to mixing: no domain prior
            self._prompt_labels = None
        self._ahead = None
        self._rng = saved.rng
        self._uniform_buffer, self._uniform_pos = saved.uniforms, 0
        self._pointers = saved.pointers
        self._drawn_total = saved.drawn_total
        self._drawn_recent = deque(saved.drawn_recent, maxlen=RECENT_CHUNKS)

    def blocks_for(self, pooled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(block of each row (N,), block sizes (B,), block offsets (B,))``: one block per domain, or one pool."""
        block_of_row = np.where(self._domain_of_row >= 0, 0, -1) if pooled else self._domain_of_row
        sizes = np.array([self._domain_sizes.sum()]) if pooled else self._domain_sizes
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return block_of_row, sizes.astype(np.int64), offsets.astype(np.int64)

    def _set_blocks(self, pooled: bool, perm: np.ndarray | None = None) -> None:
        """Switch the draw structure; with ``perm`` None, rows in index order (to be shuffled)."""
        self._pooled = pooled
        self._block_of_row, self._sizes, self._offsets = self.blocks_for(pooled)
        self._sizes_list, self._offsets_list = self._sizes.tolist(), self._offsets.tolist()
        if perm is None:
            order = np.argsort(self._block_of_row, kind="stable")
            perm = order[self._block_of_row[order] >= 0]  # rows of domains not being drawn never are
        self._perm = np.asarray(perm, dtype=np.int64)  # rows grouped by block; each block is shuffled per pass
        self._pointers = [0] * len(self._sizes_list)  # next unread position in each block

    def _build_blocks(self, pooled: bool) -> None:
        self._set_blocks(pooled)
        for k in range(len(self._sizes_list)):
            self._shuffle_domain(k)

    # ------------------------------------------------------------ drawing
    # Rows are drawn from "blocks": one per domain when mixing, one for all rows when pooled.

    def _shuffle_domain(self, k: int) -> None:
        """Start a new pass over block ``k``: shuffle it in place."""
        start = self._offsets_list[k]
        self._rng.shuffle(self._perm[start : start + self._sizes_list[k]])  # in place on the view
        self._pointers[k] = 0

    def _new_pass(self, k: int, avoid: list[np.ndarray] | list[int]) -> None:
        """Start a new pass over block ``k`` mid-chunk; rows in ``avoid`` (already in the chunk) go to its end.

        Moving them back (a stable partition) keeps the new pass a uniform shuffle of the other rows,
        so the chunk gets no row twice while the block has rows it does not hold yet.
        """
        self._shuffle_domain(k)
        if len(avoid):
            block = self._perm[self._offsets_list[k] : self._offsets_list[k] + self._sizes_list[k]]
            used = np.isin(block, np.concatenate(avoid) if isinstance(avoid[0], np.ndarray) else avoid)
            if used.any():
                block[:] = np.concatenate([block[~used], block[used]])

    def _take(self, k: int, count: int) -> np.ndarray:
        """The next ``count`` rows of block ``k``, reshuffling the block whenever it runs out."""
        taken: list[np.ndarray] = []
        while count > 0:
            if self._pointers[k] == self._sizes_list[k]:
                self._new_pass(k, taken)
            start = self._offsets_list[k] + self._pointers[k]
            size = min(count, self._sizes_list[k] - self._pointers[k])
            taken.append(self._perm[start : start + size].copy())
            self._pointers[k] += size
            count -= size
        return np.concatenate(taken)

    def _take_filtered(self, strategy: Strategy, keys: Sequence[Hashable], k: int, need: int) -> tuple[np.ndarray, int]:
        """``need`` rows of block ``k`` that pass the pre-rollout filter, and how many were skipped."""
        block = _BlockCandidates(self, k, keys)
        drawn = strategy.accept_from(block, need, self._rng, record=False)  # one report per chunk: `draw`
        return np.asarray(block.taken, dtype=np.int64), drawn.skipped

    def _uniforms(self, n: int) -> np.ndarray:
        """The next ``n`` uniforms of the stream, drawn from the generator in blocks of at least 4096.

        Every path (small chunks, drawn-ahead blocks, large chunks) reads this one stream, so the
        rows drawn do not depend on which path served a chunk.
        """
        pos = self._uniform_pos
        if self._uniform_buffer.shape[0] - pos < n:
            fresh = self._rng.random(max(UNIFORM_BLOCK, n))
            self._uniform_buffer = np.concatenate([self._uniform_buffer[pos:], fresh])
            pos = 0
        self._uniform_pos = pos + n
        return self._uniform_buffer[pos : pos + n]

    def _cumulative(self, proportions: np.ndarray) -> np.ndarray:
        """Cumulative proportions, cached while ``proportions`` is the same object."""
        cached_for, cumulative = self._cumulative_of
        if cached_for is not proportions or cumulative is None:
            cumulative = np.cumsum(proportions)
            cumulative /= cumulative[-1]
            cumulative[-1] = 1.0
            self._cumulative_of = (proportions, cumulative)
        return cumulative

    def _quota_layout(self, proportions: np.ndarray, n: int) -> np.ndarray:
        """``(n,)`` block ids, each block ``largest_remainder_quotas`` times; cached per proportions object."""
        cached_for, size, layout = self._quota_of
        if cached_for is not proportions or size != n or layout is None:
            quotas = largest_remainder_quotas(proportions, n)
            layout = np.repeat(np.arange(quotas.shape[0]), quotas)
            self._quota_of = (proportions, n, layout)
        return layout

    def _choose(self, proportions: np.ndarray, uniforms: np.ndarray, n: int) -> np.ndarray:
        """The block of each draw of ``len(uniforms) // n`` chunks of ``n``: one uniform per draw either way.

        ``quota="independent"``: each draw inverts the cumulative proportions. ``quota="exact"``: each
        chunk is the quota layout in the random order that sorting its uniforms gives.
        """
        if self.quota == "exact" and not self._pooled:
            return self._quota_layout(proportions, n)[uniforms.reshape(-1, n).argsort(axis=1)].ravel()
        return self._cumulative(proportions).searchsorted(uniforms, side="right")

    def _domain_counts(self, rows: np.ndarray, block_counts: np.ndarray) -> list[int]:
        """Draws per domain of one chunk: the block counts, or (pooled) counted from the rows."""
        if self._pooled:
            return np.bincount(self._domain_of_row[rows], minlength=len(self.domains)).tolist()
        return block_counts.tolist()

    def draw(self, proportions: np.ndarray, n: int) -> list[int] | np.ndarray:
        """``n`` dataset rows (a list for small chunks, drawn ahead in blocks; else an array): blocks
        by ``proportions`` ``(K,)`` over the domains (pooled: the one block), rows without replacement
        within a block. Pass the same array object while the proportions stay the same (the draw-ahead
        cache keys on it). A small chunk whose block would run a domain out takes the general path,
        which reshuffles; both read the same uniforms."""
        if self._pooled:
            proportions = self._pool_array
        if n <= SMALL_CHUNK and self._filter is None:
            ahead = self._next_ahead(proportions, n)
            if ahead is not None:
                return ahead
        chosen = self._choose(proportions, self._uniforms(n), n)
        counts = np.bincount(chosen, minlength=len(self._sizes_list))
        if not self._warned_repeated_rows and (counts > self._sizes).any():
            self._warn_repeated_rows(counts, proportions, n)
        order = chosen.argsort(kind="stable")  # positions of block 0's draws, then block 1's, ...
        rows = np.empty(n, dtype=np.int64)
        pointers = np.array(self._pointers, dtype=np.int64)
        end = pointers + counts
        if self._filter is not None:
            strategy, keys = self._filter
            taken, skipped = zip(
                *(self._take_filtered(strategy, keys, k, int(c)) for k, c in enumerate(counts) if c), strict=True
            )
            rows[order] = np.concatenate(taken)
            strategy.record_prompt_draws([keys[r] for r in rows.tolist()], sum(skipped))
        elif (end <= self._sizes).all():
            # The j-th draw of block k takes the row at pointer_k + j of k's shuffled block.
            base = self._offsets + pointers - (np.cumsum(counts) - counts)
            rows[order] = self._perm[np.arange(n) + np.repeat(base, counts)]
            self._pointers = end.tolist()
        else:  # some block runs out inside this chunk
            rows[order] = np.concatenate([self._take(k, int(c)) for k, c in enumerate(counts) if c])
        self._book(self._domain_counts(rows, counts))
        return rows

    def _warn_repeated_rows(self, counts: np.ndarray, proportions: np.ndarray, n: int) -> None:
        """Warn once (`RepeatedRowWarning`) that a chunk of ``n`` drew more rows of a block than it has: rows repeat."""
        self._warned_repeated_rows = True
        over = np.flatnonzero(counts > self._sizes).tolist()
        if self._pooled:
            repeated = {"all domains": (int(counts[0]), int(self._sizes[0]))}
            why = f"it has {int(self._sizes[0])} rows to draw from"
            fix = "add rows, lower batch_size, or lower num_samples"
        else:
            repeated = {self.domains[k]: (int(counts[k]), int(self._sizes[k])) for k in over}
            why = "; ".join(
                f"domain {self.domains[k]!r} has {int(self._sizes[k])} row(s) and proportion "
                f"{float(proportions[k]):.3g} drew {int(counts[k])}"
                for k in over
            )
            fix = f"add rows to {', '.join(repr(self.domains[k]) for k in over)}, lower batch_size, or lower " + (
                "that domain's proportion" if len(over) == 1 else "their proportions"
            )
        where = " (all ranks' prompts of one step)" if self._shard else ""
        warnings.warn(
            RepeatedRowWarning(
                f"dataflex: DomainMixingSampler: one batch of {n} prompts{where} holds some rows more than once: "
                f"{why}. A row repeats only when its domain's draws in a batch outnumber its rows; each repeat is one "
                f"more group of the same prompt. Fix: {fix}. This warning is shown once.",
                repeated,
            ),
            stacklevel=user_stacklevel(),
        )

    def _next_ahead(self, proportions: np.ndarray, n: int) -> list[int] | None:
        """The next small chunk from the drawn-ahead block, drawing a block when needed.

        A block is exactly what drawing its chunks one by one would give (same uniforms, same
        pointers), as long as the proportions stay the same object; when they change, the unserved
        rest of the block is rolled back. None when a domain would run out inside a block.
        """
        ahead = self._ahead
        if ahead is not None and (ahead["proportions"] is not proportions or ahead["pos"] == ahead["chunks"]):
            self._rollback_ahead()
            ahead = None
        if ahead is None:
            ahead = self._draw_ahead(proportions, n)
            if ahead is None:
                return None
        pos = ahead["pos"]
        ahead["pos"] = pos + 1
        if self._mixing_strategy is not None:  # the strategy hears of every chunk as it is drawn; else book lazily
            self._book_served()
        return ahead["rows"][pos * n : (pos + 1) * n]

    def _draw_ahead(self, proportions: np.ndarray, n: int) -> _Ahead | None:
        """Draw `PREFETCH_CHUNKS` small chunks of ``n`` in one step; None (nothing drawn) when a block would run out."""
        chunks = PREFETCH_CHUNKS
        chosen = self._choose(proportions, self._uniforms(chunks * n), n)
        counts = np.bincount(chosen, minlength=len(self._sizes_list))
        pointers = np.array(self._pointers, dtype=np.int64)
        if not (pointers + counts <= self._sizes).all():
            self._uniform_pos -= chunks * n  # not drawn after all: the per-chunk path reshuffles as needed
            return None
        order = chosen.argsort(kind="stable")
        base = self._offsets + pointers - (np.cumsum(counts) - counts)
        rows = np.empty(chunks * n, dtype=np.int64)
        rows[order] = self._perm[np.arange(chunks * n) + np.repeat(base, counts)]
        self._pointers = (pointers + counts).tolist()
        domains = self._domain_of_row[rows] if self._pooled else chosen  # what the bookkeeping counts
        self._ahead = {
            "proportions": proportions,
            "rows": rows.tolist(),
            "chosen": chosen,
            "domains": domains,
            "chunks": chunks,
            "pos": 0,
            "booked": 0,
            "n": n,
        }
        return self._ahead

    def _unbooked(self) -> tuple[list[int], list[list[int]]]:
        """Draws per domain of the served chunks of the drawn-ahead block not counted yet: the total over
        them, and each chunk's counts (only the last `RECENT_CHUNKS`). Reads the block, changes nothing."""
        ahead, k = self._ahead, len(self.domains)
        if ahead is None or ahead["booked"] == ahead["pos"]:
            return [0] * k, []
        n = ahead["n"]
        served = ahead["pos"] - ahead["booked"]
        chosen = ahead["domains"][ahead["booked"] * n : ahead["pos"] * n]
        recent = min(served, RECENT_CHUNKS)
        tail = chosen[(served - recent) * n :].reshape(recent, n) + k * np.arange(recent)[:, None]
        per_chunk = np.bincount(tail.ravel(), minlength=recent * k).reshape(recent, k).tolist()
        return np.bincount(chosen, minlength=k).tolist(), per_chunk

    def _booked_counts(self) -> tuple[list[int], list[list[int]]]:
        """``(drawn_total, drawn_recent)`` with every served chunk counted, as new lists; changes nothing."""
        total, chunks = self._unbooked()
        recent = [list(c) for c in self._drawn_recent] + chunks
        return [t + c for t, c in zip(self._drawn_total, total, strict=True)], recent[-RECENT_CHUNKS:]

    def _book_served(self) -> None:
        """Count the served chunks of the drawn-ahead block that are not counted yet."""
        ahead = self._ahead
        if ahead is None or ahead["booked"] == ahead["pos"]:
            return
        if self._mixing_strategy is not None:  # the strategy is told chunk by chunk (each booked as it is served)
            n, k = ahead["n"], len(self.domains)
            chosen = ahead["domains"][ahead["booked"] * n : ahead["pos"] * n]
            for c in range(ahead["pos"] - ahead["booked"]):
                self._book(np.bincount(chosen[c * n : (c + 1) * n], minlength=k).tolist())
        else:  # totals in one count; per-chunk counts only for the recent window
            total, chunks = self._unbooked()
            for d, c in enumerate(total):
                self._drawn_total[d] += c
            self._drawn_recent.extend(chunks)
        ahead["booked"] = ahead["pos"]

    def _unserved(self) -> tuple[list[int], int]:
        """Block pointers and uniform position as if only the served chunks of the drawn-ahead block were drawn."""
        pointers, position = list(self._pointers), self._uniform_pos
        ahead = self._ahead
        if ahead is not None and ahead["pos"] < ahead["chunks"]:
            unserved = ahead["chosen"][ahead["pos"] * ahead["n"] :]
            for d, c in enumerate(np.bincount(unserved, minlength=len(pointers)).tolist()):
                pointers[d] -= c
            position -= unserved.shape[0]
        return pointers, position

    def _rollback_ahead(self) -> None:
        """Undo the unserved chunks of the drawn-ahead block (pointers and uniforms)."""
        self._book_served()
        self._pointers, self._uniform_pos = self._unserved()
        self._ahead = None

    def _book(self, counts: list[int]) -> None:
        """Count one chunk's draws per domain, and tell the strategy."""
        total = self._drawn_total
        for k, c in enumerate(counts):
            if c:
                total[k] += c
        self._drawn_recent.append(counts)
        if self._mixing_strategy is not None:
            self._mixing_strategy.observe_sampled(dict(zip(self.domains, counts, strict=True)))


class _BlockCandidates:
    """The `PromptSource` of one domain block: its shuffled rows from the pointer on, a window at a time."""

    def __init__(self, drawer: BlockDrawer, k: int, keys: Sequence[Hashable]) -> None:
        self.drawer, self.k, self.keys = drawer, k, keys
        self.taken: list[int] = []
        self.in_chunk: set[int] = set()
        self._rows = np.empty(0, dtype=np.int64)

    def offer(self, need: int) -> Candidates:
        """The block's next rows from its pointer on (a new pass when it is spent), a window of ``2 * need``."""
        drawer, k = self.drawer, self.k
        if drawer._pointers[k] == drawer._sizes_list[k]:
            drawer._new_pass(k, self.taken)
        begin = drawer._offsets_list[k] + drawer._pointers[k]
        window = min(drawer._sizes_list[k] - drawer._pointers[k], max(2 * need, 8))
        self._rows = drawer._perm[begin : begin + window]
        rows = self._rows.tolist()
        labels = None if drawer._prompt_labels is None else [drawer._prompt_labels[r] for r in rows]
        # After a wrap-around the chunk's own rows come back at the end of the new pass: while the
        # domain has rows the chunk does not hold yet, a row is not taken twice (no prompt twice in
        # one generation batch, none on two ranks in one step).
        repeat = None
        if self.in_chunk and len(self.in_chunk) < drawer._sizes_list[k]:
            repeat = np.fromiter((r in self.in_chunk for r in rows), dtype=bool, count=len(rows))
        return Candidates(keys=[self.keys[r] for r in rows], labels=labels, exclude=repeat)

    def take(self, accepted: np.ndarray, considered: int) -> None:
        """Take the accepted rows into the chunk and move the block's pointer past the considered ones."""
        chosen = self._rows[accepted].tolist()
        self.taken.extend(chosen)
        self.in_chunk.update(chosen)
        self.drawer._pointers[self.k] += considered
