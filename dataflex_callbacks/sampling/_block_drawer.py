"""`BlockDrawer`: draws a sampler's rows from shuffled blocks (one per domain, or one pool), a chunk at a time.

Rows are drawn without replacement within a block, which is reshuffled when it runs out. Every
chunk reads one stream of uniforms (drawn from the generator in blocks), and small chunks are drawn
ahead several at a time while the proportions stay the same (the draw-ahead cache); the rows and
the random state are the same whichever path served a chunk.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from dataflex_callbacks.errors import RepeatedRowWarning, user_stacklevel
from dataflex_callbacks.sampling.prompt_acceptance import Candidates, accept_from

RECENT_CHUNKS = 20  # chunks in the "recent" actual-proportion window
UNIFORM_BLOCK = 4096  # uniforms drawn per generator call
SMALL_CHUNK = 32  # chunks up to this many prompts are drawn ahead, several at a time
PREFETCH_CHUNKS = 64  # small chunks drawn in one vectorised step while the proportions stay the same
TIE_TOLERANCE = 1e-9  # quota remainders this close count as equal (float noise, e.g. 0.1 * 30)


def largest_remainder_quotas(proportions: Sequence[float], n: int) -> np.ndarray:
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


class BlockDrawer:
    """The drawing half of `DomainMixingSampler`: blocks, passes, uniforms, quotas, the draw-ahead cache.

    A mixin: the sampler sets what it reads (``domains``, ``strategy``, ``quota``, ``layout``, ``_mixing``,
    ``_pre_select``, ``_keys``, ``_prompt_labels``, ``_domain_of_row``, ``_domain_sizes``, ``_rng``,
    ``_uniform_buffer``, ``_uniform_pos``, ``_ahead``, ``_cumulative_of``, ``_quota_of``, ``_drawn_total``,
    ``_drawn_recent``, ``_warned_repeated_rows``) and calls `_build_blocks` once before drawing.
    """

    def _blocks_for(self, pooled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(block of each row (N,), block sizes (B,), block offsets (B,))``: one block per domain, or one pool."""
        block_of_row = np.where(self._domain_of_row >= 0, 0, -1) if pooled else self._domain_of_row
        sizes = np.array([self._domain_sizes.sum()]) if pooled else self._domain_sizes
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return block_of_row, sizes.astype(np.int64), offsets.astype(np.int64)

    def _set_blocks(self, pooled: bool, perm: np.ndarray | None = None) -> None:
        """Switch the draw structure; with ``perm`` None, rows in index order (to be shuffled)."""
        self._pooled = pooled
        self._block_of_row, self._sizes, self._offsets = self._blocks_for(pooled)
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
        taken = []
        while count > 0:
            if self._pointers[k] == self._sizes_list[k]:
                self._new_pass(k, taken)
            start = self._offsets_list[k] + self._pointers[k]
            size = min(count, self._sizes_list[k] - self._pointers[k])
            taken.append(self._perm[start : start + size].copy())
            self._pointers[k] += size
            count -= size
        return np.concatenate(taken)

    def _take_filtered(self, k: int, need: int) -> tuple[np.ndarray, int]:
        """``need`` rows of block ``k`` that pass the pre-rollout filter, and how many were skipped."""
        block = _BlockCandidates(self, k)
        drawn = accept_from(block, self._pre_select, need, self._rng, record=False)
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
        if self._cumulative_of[0] is not proportions:
            cumulative = np.cumsum(proportions)
            cumulative /= cumulative[-1]
            cumulative[-1] = 1.0
            self._cumulative_of = (proportions, cumulative)
        return self._cumulative_of[1]

    def _quota_layout(self, proportions: np.ndarray, n: int) -> np.ndarray:
        """``(n,)`` block ids, each block ``largest_remainder_quotas`` times; cached per proportions object."""
        if self._quota_of[0] is not proportions or self._quota_of[1] != n:
            quotas = largest_remainder_quotas(proportions, n)
            self._quota_of = (proportions, n, np.repeat(np.arange(quotas.shape[0]), quotas))
        return self._quota_of[2]

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

    def _draw_chunk(self, proportions: np.ndarray, n: int):
        """``n`` dataset rows (a list for small chunks, drawn ahead in blocks; else an array): blocks
        by ``proportions``, rows without replacement within a block. A small chunk whose block would
        run a domain out takes the general path, which reshuffles; both read the same uniforms."""
        if n <= SMALL_CHUNK and self._pre_select is None:
            rows = self._next_ahead(proportions, n)
            if rows is not None:
                return rows
        chosen = self._choose(proportions, self._uniforms(n), n)
        counts = np.bincount(chosen, minlength=len(self._sizes_list))
        if not self._warned_repeated_rows and (counts > self._sizes).any():
            self._warn_repeated_rows(counts, proportions, n)
        order = chosen.argsort(kind="stable")  # positions of block 0's draws, then block 1's, ...
        rows = np.empty(n, dtype=np.int64)
        pointers = np.array(self._pointers, dtype=np.int64)
        end = pointers + counts
        if self._pre_select is not None:
            taken, skipped = zip(*(self._take_filtered(k, int(c)) for k, c in enumerate(counts) if c))
            rows[order] = np.concatenate(taken)
            self._pre_select.record_draws([self._keys[r] for r in rows.tolist()], sum(skipped))
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
        where = " (all ranks' prompts of one step)" if self.layout == "shard" else ""
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
        if self._mixing:  # the strategy hears of every chunk as it is drawn; otherwise book lazily
            self._book_served()
        return ahead["rows"][pos * n : (pos + 1) * n]

    def _draw_ahead(self, proportions: np.ndarray, n: int) -> dict | None:
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
        return [t + c for t, c in zip(self._drawn_total, total)], recent[-RECENT_CHUNKS:]

    def _book_served(self) -> None:
        """Count the served chunks of the drawn-ahead block that are not counted yet."""
        ahead = self._ahead
        if ahead is None or ahead["booked"] == ahead["pos"]:
            return
        if self._mixing:  # the strategy is told chunk by chunk (every chunk is booked as it is served)
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
        if self._mixing:
            self.strategy.observe_sampled(dict(zip(self.domains, counts)))


class _BlockCandidates:
    """The `PromptSource` of one domain block: its shuffled rows from the pointer on, a window at a time."""

    def __init__(self, drawer: "BlockDrawer", k: int):
        self.drawer, self.k = drawer, k
        self.taken: list[int] = []
        self.in_chunk: set[int] = set()
        self._rows = np.empty(0, dtype=np.int64)

    def offer(self, need: int) -> Candidates:
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
        return Candidates(keys=[drawer._keys[r] for r in rows], labels=labels, exclude=repeat)

    def take(self, accepted: np.ndarray, considered: int) -> None:
        chosen = self._rows[accepted].tolist()
        self.taken.extend(chosen)
        self.in_chunk.update(chosen)
        self.drawer._pointers[self.k] += considered
